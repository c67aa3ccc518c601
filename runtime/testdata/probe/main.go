package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func int80(nr uintptr) uintptr

func main() {
	if len(os.Args) < 2 {
		fmt.Println(`{"error":"usage: probe posture|syscalls|oom|forks|int80|true"}`)
		os.Exit(2)
	}
	// The probe makes dangerous calls (mount, reboot(CAD_OFF), ...): run
	// them only as a container's init, never on a host by mistake.
	if os.Args[1] != "int80" && os.Args[1] != "true" && os.Getpid() != 1 {
		fmt.Println(`{"error":"probe must run as pid 1 of a container"}`)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "posture":
		emit(posture())
	case "syscalls":
		emit(syscalls())
	case "oom":
		oom()
	case "forks":
		forks()
	case "int80":
		r := int80(20) // i386 getpid
		fmt.Println(int(int32(r)))
	case "true":
	}
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func errStr(err error) string {
	if err == nil {
		return "OK"
	}
	var e syscall.Errno
	if errorsAs(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

func errorsAs(err error, e *syscall.Errno) bool {
	for err != nil {
		if x, ok := err.(syscall.Errno); ok {
			*e = x
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func posture() map[string]any {
	out := map[string]any{}
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "CapEff", "CapBnd", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs", "Seccomp":
			out[k] = strings.TrimSpace(v)
		}
	}
	ns := map[string]string{}
	for _, n := range []string{"pid", "mnt", "uts", "ipc", "net", "cgroup"} {
		ns[n], _ = os.Readlink("/proc/self/ns/" + n)
	}
	out["ns"] = ns
	// /proc/kcore is masked (a /dev/null bind): reads return nothing.
	if f, err := os.Open("/proc/kcore"); err != nil {
		out["kcore"] = errStr(err)
	} else {
		n, _ := f.Read(make([]byte, 64))
		f.Close()
		out["kcore"] = fmt.Sprintf("read %d bytes", n)
	}
	for name, p := range map[string]string{
		"sysrq": "/proc/sysrq-trigger", "core_pattern": "/proc/sys/kernel/core_pattern",
		"sys_kernel": "/sys/kernel/uevent_helper", "cgroup_mem": "/sys/fs/cgroup/memory/memory.limit_in_bytes",
		"cgroup_pids": "/sys/fs/cgroup/pids/pids.max", "release_agent": "/sys/fs/cgroup/memory/release_agent",
	} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		out["write_"+name] = errStr(err)
	}
	_, err := os.Stat("/dev/kmsg")
	out["dev_kmsg"] = errStr(err)
	tl, err := os.ReadFile("/proc/timer_list")
	out["timer_list"] = fmt.Sprintf("read %d bytes %s", len(tl), errStr(err))
	out["mknod"] = errStr(unix.Mknod("/tmp/sda", unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))))
	var rl unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
	out["nofile"] = fmt.Sprintf("%d/%d", rl.Cur, rl.Max)
	oom, _ := os.ReadFile("/proc/self/oom_score_adj")
	out["oom_score_adj"] = strings.TrimSpace(string(oom))
	fds := map[string]string{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fds[e.Name()], _ = os.Readlink("/proc/self/fd/" + e.Name())
	}
	out["fds"] = fds
	return out
}

func raw(nr uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	return nil
}

func cstr(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}

func sock(family uintptr, typ int) error {
	fd, _, e := unix.Syscall(unix.SYS_SOCKET, family, uintptr(typ), 0)
	if e != 0 {
		return e
	}
	unix.Close(int(fd))
	return nil
}

func syscalls() map[string]string {
	out := map[string]string{}
	step := func(s string) { fmt.Fprintln(os.Stderr, "step", s) }
	// CLONE_NEWUSER through fork (a Go process is threaded, so a bare
	// unshare(CLONE_NEWUSER) would fail with EINVAL anyway).
	cmd := exec.Command("/proc/self/exe", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	step("clone_newuser")
	out["clone_newuser"] = errStr(cmd.Run())
	step("unshare_newuser")
	out["unshare_newuser"] = errStr(unix.Unshare(unix.CLONE_NEWUSER))
	step("unshare_newns")
	out["unshare_newns"] = errStr(unix.Unshare(unix.CLONE_NEWNS))
	step("mount")
	out["mount"] = errStr(unix.Mount("none", "/tmp", "tmpfs", 0, ""))
	// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create=1)
	step("keyctl")
	out["keyctl"] = errStr(raw(unix.SYS_KEYCTL, 0, uintptr(0xfffffffe), 1))
	step("add_key")
	out["add_key"] = errStr(raw(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(cstr("user"))), uintptr(unsafe.Pointer(cstr("probe"))), uintptr(unsafe.Pointer(cstr("x"))), 1, uintptr(0xfffffffe)))
	attr := make([]byte, 256)
	step("bpf")
	out["bpf"] = errStr(raw(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, uintptr(unsafe.Pointer(&attr[0])), 128))
	step("perf_event_open")
	out["perf_event_open"] = errStr(raw(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])), 0, ^uintptr(0), ^uintptr(0), 0))
	params := make([]byte, 120)
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if e == 0 {
		unix.Close(int(fd))
		out["io_uring_setup"] = "OK"
	} else {
		out["io_uring_setup"] = errStr(e)
	}
	fd, _, e = unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */, 0, 0)
	if e == 0 {
		unix.Close(int(fd))
		out["userfaultfd"] = "OK"
	} else {
		out["userfaultfd"] = errStr(e)
	}
	step("init_module")
	out["init_module"] = errStr(raw(unix.SYS_INIT_MODULE, 0, 0, uintptr(unsafe.Pointer(cstr("")))))
	step("open_by_handle_at")
	out["open_by_handle_at"] = errStr(raw(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(0xffffff9c) /* AT_FDCWD as an int */, uintptr(unsafe.Pointer(&attr[0])), 0))
	step("socket_alg")
	out["socket_alg"] = errStr(sock(38, unix.SOCK_SEQPACKET))
	step("socket_alg_highbits")
	out["socket_alg_highbits"] = errStr(sock(1<<32|38, unix.SOCK_SEQPACKET))
	step("socket_vsock")
	out["socket_vsock"] = errStr(sock(40, unix.SOCK_STREAM))
	step("socket_tipc")
	out["socket_tipc"] = errStr(sock(30, unix.SOCK_RDM))
	step("socket_inet")
	out["socket_inet"] = errStr(sock(unix.AF_INET, unix.SOCK_STREAM))
	step("socket_unix")
	out["socket_unix"] = errStr(sock(unix.AF_UNIX, unix.SOCK_STREAM))
	step("socket_netlink")
	out["socket_netlink"] = errStr(sock(unix.AF_NETLINK, unix.SOCK_RAW))
	step("clone3")
	out["clone3"] = errStr(raw(unix.SYS_CLONE3, 0, 0))
	step("personality_query")
	out["personality_query"] = errStr(raw(unix.SYS_PERSONALITY, 0xffffffff))
	step("personality_rie")
	out["personality_rie"] = errStr(raw(unix.SYS_PERSONALITY, 0x0400000))
	raw(unix.SYS_PERSONALITY, 0) // undo if it was allowed
	if nsfd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		out["setns"] = errStr(unix.Setns(nsfd, unix.CLONE_NEWNET))
		unix.Close(nsfd)
	}
	step("reboot")
	out["reboot"] = errStr(raw(unix.SYS_REBOOT, 0xfee1dead, 672274793, 0 /* CAD_OFF */))
	// The i386 ABI through int 0x80, in a child: the filter kills it.
	out["int80"] = int80Child()
	return out
}

// int80Child makes an i386-ABI syscall in a child. The seccomp filter's
// bad-arch action kills the calling thread with SIGSYS; in a Go process the
// other threads live on, so a child whose main thread is a zombie after a
// short wait counts as killed too.
func int80Child() string {
	c := exec.Command("/proc/self/exe", "int80")
	var buf strings.Builder
	c.Stdout = &buf
	if err := c.Start(); err != nil {
		return errStr(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed:" + unix.SignalName(ws.Signal())
		}
		if err != nil {
			return errStr(err)
		}
		return "ran:" + strings.TrimSpace(buf.String())
	case <-time.After(time.Second):
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
		c.Process.Kill()
		<-done
		if _, rest, ok := strings.Cut(string(st), ") "); ok && strings.HasPrefix(rest, "Z") {
			return "killed:thread"
		}
		return "hung"
	}
}

// oom allocates and touches memory until the kernel kills it.
func oom() {
	var keep [][]byte
	for i := 1; i <= 256; i++ {
		b := make([]byte, 4<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
		fmt.Printf("allocated %d MiB\n", i*4)
	}
	runtime.KeepAlive(keep)
	fmt.Println("survived")
}

// forks starts single-threaded children until fork fails, printing the
// count after each success so it survives a runtime crash at the limit.
func forks() {
	runtime.GOMAXPROCS(1)
	max := 100
	if len(os.Args) > 2 {
		fmt.Sscan(os.Args[2], &max)
	}
	n := 0
	for n < max {
		_, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, &syscall.ProcAttr{})
		if err != nil {
			fmt.Printf("stopped %d %s\n", n, errStr(err))
			return
		}
		n++
		fmt.Printf("forked %d\n", n)
	}
	fmt.Println("unbounded")
}

package main

import (
	"errors"
	"fmt"
	"io/fs"
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

// int80Raw makes i386 getpid through int 0x80; the filter should kill it.
// It names the thread that makes the call on stderr first: the main
// goroutine need not run on the thread-group leader, so the parent judges
// that thread, not the process.
func int80Raw() map[string]string {
	runtime.LockOSThread()
	fmt.Fprintf(os.Stderr, "tid %d\n", unix.Gettid())
	r := int80(20)
	return map[string]string{"int80": fmt.Sprint(int(int32(r)))}
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

func cstr(s string) uintptr {
	b := append([]byte(s), 0)
	return uintptr(unsafe.Pointer(&b[0]))
}

func sock(family uintptr, typ, proto int) error {
	fd, _, e := unix.Syscall(unix.SYS_SOCKET, family, uintptr(typ), uintptr(proto))
	if e != 0 {
		return e
	}
	unix.Close(int(fd))
	return nil
}

func fdCall(nr uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	fd, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	unix.Close(int(fd))
	return nil
}

// syscalls is the blocked-syscall table (checklist #14): errno per call.
// Arguments are chosen so that an allowed call does nothing lasting.
func syscalls() map[string]string {
	out := map[string]string{}
	cmd := exec.Command("/proc/self/exe", "whoami")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	out["clone_newuser"] = errStr(cmd.Run())
	out["unshare_newuser"] = errStr(unix.Unshare(unix.CLONE_NEWUSER))
	out["unshare_newns"] = errStr(unix.Unshare(unix.CLONE_NEWNS))
	os.MkdirAll("/tmp/probe-mnt", 0o755)
	err := unix.Mount("none", "/tmp/probe-mnt", "tmpfs", 0, "")
	out["mount"] = errStr(err)
	if err == nil {
		unix.Unmount("/tmp/probe-mnt", unix.MNT_DETACH)
	}
	out["keyctl"] = errStr(raw(unix.SYS_KEYCTL, 0 /* GET_KEYRING_ID */, uintptr(0xfffffffe), 0))
	out["add_key"] = errStr(raw(unix.SYS_ADD_KEY, cstr("user"), cstr("probe"), cstr("x"), 1, uintptr(0xfffffffe)))
	attr := make([]byte, 256)
	out["bpf"] = errStr(fdCall(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, uintptr(unsafe.Pointer(&attr[0])), 128))
	out["perf_event_open"] = errStr(fdCall(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])), 0, ^uintptr(0), ^uintptr(0), 0))
	params := make([]byte, 120)
	out["io_uring_setup"] = errStr(fdCall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0]))))
	out["userfaultfd"] = errStr(fdCall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */))
	out["init_module"] = errStr(raw(unix.SYS_INIT_MODULE, 0, 0, cstr("")))
	out["finit_module"] = errStr(raw(unix.SYS_FINIT_MODULE, ^uintptr(0), cstr(""), 0))
	out["delete_module"] = errStr(raw(unix.SYS_DELETE_MODULE, cstr("probe-none"), 0))
	out["kexec_load"] = errStr(raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0))
	out["open_by_handle_at"] = errStr(fdCall(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(0xffffff9c), uintptr(unsafe.Pointer(&attr[0])), 0))
	out["socket_alg"] = errStr(sock(unix.AF_ALG, unix.SOCK_SEQPACKET, 0))
	out["socket_alg_highbits"] = errStr(sock(1<<32|unix.AF_ALG, unix.SOCK_SEQPACKET, 0))
	out["socket_vsock"] = errStr(sock(unix.AF_VSOCK, unix.SOCK_STREAM, 0))
	out["socket_inet"] = errStr(sock(unix.AF_INET, unix.SOCK_STREAM, 0))
	out["socket_unix"] = errStr(sock(unix.AF_UNIX, unix.SOCK_STREAM, 0))
	out["clone3"] = errStr(raw(unix.SYS_CLONE3, 0, 0))
	out["reboot"] = errStr(raw(unix.SYS_REBOOT, 0xfee1dead, 672274793, 0 /* CAD_OFF */))
	if nsfd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		out["setns"] = errStr(unix.Setns(nsfd, unix.CLONE_NEWNET))
		unix.Close(nsfd)
	}
	out["int80"] = int80Child()
	out["after"] = "alive"
	return out
}

// int80Child makes an i386-ABI syscall in a child. The filter's bad-arch
// action kills the calling thread with SIGSYS; in a Go process the other
// threads may live on, so a child whose calling thread is gone (or a
// zombie) counts as killed.
func int80Child() string {
	c := exec.Command("/proc/self/exe", "int80")
	errs, err := c.StderrPipe()
	if err != nil {
		return errStr(err)
	}
	if err := c.Start(); err != nil {
		return errStr(err)
	}
	// The tid line is read before Wait, which closes the pipe.
	var tid int
	named := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		fmt.Fscanf(errs, "tid %d\n", &tid)
		close(named)
		done <- c.Wait()
	}()
	// A killed thread leaves the process running: poll the named thread.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return "killed:" + unix.SignalName(ws.Signal())
			}
			if err != nil {
				return errStr(err)
			}
			return "ran"
		case <-tick.C:
			select {
			case <-named:
			default:
				continue // not yet at the call
			}
			if tid > 0 && threadEnded(c.Process.Pid, tid) {
				c.Process.Kill()
				<-done
				return "killed:thread"
			}
		case <-deadline:
			c.Process.Kill()
			<-done
			return "hung"
		}
	}
}

// threadEnded reports whether thread tid of pid is gone or a zombie.
func threadEnded(pid, tid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	_, rest, ok := strings.Cut(string(st), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}

// rawSock tries raw and packet sockets (checklist #25: no CAP_NET_RAW).
func rawSock() map[string]string {
	return map[string]string{
		"raw_icmp":   errStr(sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)),
		"raw_tcp":    errStr(sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)),
		"packet_raw": errStr(sock(unix.AF_PACKET, unix.SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */)),
		"raw6":       errStr(sock(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6)),
	}
}

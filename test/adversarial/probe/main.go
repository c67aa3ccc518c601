package main

import (
	"encoding/json"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// initPIDNSInode is PROC_PID_INIT_INO: the inode of the host's initial PID
// namespace, the same on every Linux kernel.
const initPIDNSInode = 0xEFFFFFFC

func main() {
	if len(os.Args) < 2 {
		fmt.Println(`{"error":"usage: probe <command> [args]"}`)
		os.Exit(2)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil || st.Ino == initPIDNSInode {
		fmt.Println(`{"error":"refusing to run in the host's initial pid namespace"}`)
		os.Exit(2)
	}
	cmds := map[string]func([]string) any{
		"posture":  func([]string) any { return posture() },
		"kpaths":   func([]string) any { return kernelPaths() },
		"syscalls": func([]string) any { return syscalls() },
		"cgroup":   func([]string) any { return cgroupEscape() },
		"devices":  func([]string) any { return devices() },
		"setuid":   setuidTest,
		"whoami":   func([]string) any { return whoami() },
		"fds":      func(a []string) any { return fdList(a) },
		"cwd":      func([]string) any { return cwdCheck() },
		"cwdjail":  func([]string) any { return cwdJail() },
		"exewatch": exeWatch,
		"race":     race,
		"connect":  connect,
		"rawsock":  func([]string) any { return rawSock() },
		"forkbomb": forkBomb,
		"threads":  threadBomb,
		"udp":      udp,
		"inodes":   inodeFill,
		"int80":    func([]string) any { return int80Raw() },
		"sleep":    sleepFor,
		"unixscan": func([]string) any { return unixScan() },
	}
	f, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Printf(`{"error":"unknown command %q"}`+"\n", os.Args[1])
		os.Exit(2)
	}
	emit(f(os.Args[2:]))
}

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	fmt.Println(string(b))
}

// errStr names an errno ("EPERM"), "OK" for nil, or the error text.
func errStr(err error) string {
	if err == nil {
		return "OK"
	}
	for e := err; e != nil; {
		if x, ok := e.(syscall.Errno); ok {
			return unix.ErrnoName(x)
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return err.Error()
}

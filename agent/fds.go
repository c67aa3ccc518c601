package agent

import (
	"fmt"
	"log"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FDAllowlist is the descriptor table berth-agent may start with: stdin
// (/dev/null), stdout and stderr (the sandbox's agent.log). Anything else
// came from the runtime or the daemon (the runc fd-leak class,
// CVE-2024-21626: a host directory fd inherited by the container) and is a
// breach of the sandbox boundary (checklist #12).
var FDAllowlist = []int{0, 1, 2}

// CheckStartFDs refuses to run with any inherited descriptor outside
// FDAllowlist: it returns an error naming each one (and what it points at)
// so the start fails with a clear message instead of the sandbox running
// with a hole. Inherited means open without close-on-exec: every
// descriptor this process image opened itself (the Go runtime keeps cgroup
// files, an epoll and an eventfd open before main) is close-on-exec.
// Call it first thing in main.
func CheckStartFDs() error {
	fds, err := openFDs()
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	allowed := map[int]bool{}
	for _, fd := range FDAllowlist {
		allowed[fd] = true
	}
	var bad []string
	for _, fd := range fds {
		if allowed[fd] {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		bad = append(bad, describeFD(fd))
	}
	if len(bad) > 0 {
		return fmt.Errorf("inherited descriptors outside the allowlist %v: %s", FDAllowlist, strings.Join(bad, ", "))
	}
	return nil
}

// CloseOnExecInherited marks every descriptor from 3 up close-on-exec, so
// nothing the agent inherited reaches a user's command. The agent's own
// descriptors are already close-on-exec.
func CloseOnExecInherited() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Kernels before 5.11: walk /proc/self/fd.
	fds, err := openFDs()
	if err != nil {
		return err
	}
	for _, fd := range fds {
		if fd >= 3 {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// checkExecFDs runs before every process the agent starts: each descriptor
// from 3 up must be close-on-exec (the child gets only the ones passed to it
// explicitly). One that is not is marked close-on-exec and reported, so a
// leak anywhere in the agent never reaches user code.
func checkExecFDs() {
	fds, err := openFDs()
	if err != nil {
		log.Printf("fd check: %v", err)
		return
	}
	for _, fd := range fds {
		if fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		log.Printf("fd check: %s was inheritable; marked close-on-exec", describeFD(fd))
		unix.CloseOnExec(fd)
	}
}

// openFDs lists this process's descriptors (without the one used to list).
func openFDs() ([]int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	self := int(d.Fd())
	d.Close()
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil && fd != self {
			fds = append(fds, fd)
		}
	}
	sort.Ints(fds)
	return fds, nil
}

func describeFD(fd int) string {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return strconv.Itoa(fd)
	}
	return fmt.Sprintf("%d → %s", fd, target)
}

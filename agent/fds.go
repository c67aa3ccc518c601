package agent

import (
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExecInherited marks every descriptor from 3 up close-on-exec, so
// nothing the agent inherited (from the runtime, or leaked by the host)
// reaches a user's command (checklist #12; the runc fd-leak class,
// CVE-2024-21626). The agent's own descriptors are already close-on-exec.
// Call it first thing in main.
func CloseOnExecInherited() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Kernels before 5.11: walk /proc/self/fd.
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	self := int(d.Fd())
	if err != nil {
		d.Close()
		return err
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 || fd == self {
			continue
		}
		unix.CloseOnExec(fd)
	}
	return d.Close()
}

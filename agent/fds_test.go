package agent

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExecFDCheck: an inheritable descriptor in the agent is marked
// close-on-exec before any command starts; the negative control is the
// same descriptor before the check.
func TestExecFDCheck(t *testing.T) {
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC != 0 {
		t.Fatal("negative control: fd should be inheritable before the check")
	}
	checkExecFDs()
	if flags, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
		t.Fatal("inheritable fd left for the next command")
	}
}

// TestCheckStartFDs: any descriptor beyond 0-2 makes the start refuse, and
// the error names it.
func TestCheckStartFDs(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := CheckStartFDs(); err != nil {
		t.Fatalf("negative control: a close-on-exec fd is not inherited: %v", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	err = CheckStartFDs()
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v, want the leaked %s named", err, dir)
	}
}

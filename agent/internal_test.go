package agent

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/internal/errdefs"
)

func running(pid int) bool {
	_, state, ok := child.Stat(pid)
	return ok && state != 'Z'
}

// startTree starts a shell whose child leaves the process group with
// setsid, and returns the shell's pid, the escaped child's pid and the
// shell's exit channel.
func startTree(t *testing.T, r *Reaper) (int, int, <-chan child.Exit) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	attr := &syscall.ProcAttr{
		Env:   []string{"PATH=" + os.Getenv("PATH")},
		Files: []uintptr{0, pw.Fd(), 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	pid, ch, err := r.Start(sh, []string{"sh", "-c", "setsid sleep 100 & echo $!; sleep 100"}, attr)
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	kid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(kid, syscall.SIGKILL) })
	// setsid(1) execs sleep once it has left the group; wait for that so
	// the test probes the escaped process, not setsid in flight.
	for i := 0; i < 1000; i++ {
		if pgid, _ := syscall.Getpgid(kid); pgid == kid {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid, kid, ch
}

func TestKillTreeReachesEscapedDescendants(t *testing.T) {
	r := NewReaper(false)
	defer r.Stop()

	// Negative control: killing only the process group (what most exec
	// implementations do) leaves the setsid child running.
	pid, kid, ch := startTree(t, r)
	syscall.Kill(-pid, syscall.SIGKILL)
	<-ch
	if !running(kid) {
		t.Fatal("negative control: the setsid child died with its process group; the probe cannot tell child.KillTree works")
	}
	syscall.Kill(kid, syscall.SIGKILL)

	pid, kid, ch = startTree(t, r)
	child.KillTree(pid)
	e := <-ch
	if !e.Status.Signaled() || e.Status.Signal() != syscall.SIGKILL {
		t.Fatalf("root status %v", e.Status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for running(kid) {
		if time.Now().After(deadline) {
			t.Fatalf("setsid descendant %d survived child.KillTree", kid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReaperLeavesOtherChildrenAlone(t *testing.T) {
	r := NewReaper(false)
	defer r.Stop()
	for i := 0; i < 20; i++ {
		// An exec.Cmd in the same process must keep its own status.
		err := exec.Command("sh", "-c", "exit 7").Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Fatalf("exec.Cmd lost its status: %v", err)
		}
		// And an immediately exiting child of ours is never lost.
		pid, ch, err := r.Start("/bin/sh", []string{"sh", "-c", "exit 3"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-ch:
			if e.Lost || e.Status.ExitStatus() != 3 {
				t.Fatalf("pid %d: %+v", pid, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("exit of pid %d never delivered", pid)
		}
	}
}

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "passwd"), []byte("root:x:0:0::/root:/bin/sh\nbad line\nuser:x:1000:1001::/home/user:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "group"), []byte("user:x:1001:\ndocker:x:999:a,user\nwheel:x:10:user2\n"), 0o644)
	a, err := lookupUser(dir, "user")
	if err != nil || a.uid != 1000 || a.gid != 1001 || a.home != "/home/user" || len(a.groups) != 1 || a.groups[0] != 999 {
		t.Fatalf("user: %+v %v", a, err)
	}
	if a, err := lookupUser(dir, "1000"); err != nil || a.name != "user" {
		t.Fatalf("by uid: %+v %v", a, err)
	}
	if _, err := lookupUser(dir, "ghost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("ghost: %v", err)
	}
	if _, err := lookupUser(dir, "a:b"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("colon: %v", err)
	}
	s := &Server{cfg: Config{EtcDir: dir, DefaultUser: "missing"}}
	if a := s.defaultAccount(); a.uid != 0 || a.home != "/root" {
		t.Fatalf("fallback to root: %+v", a)
	}
}

// procSignalState names the fields a log line needs to explain a signal
// that had no effect.
func TestProcSignalState(t *testing.T) {
	got := procSignalState(os.Getpid())
	for _, f := range []string{"State=", "SigPnd=", "ShdPnd=", "SigBlk=", "SigIgn=", "SigCgt="} {
		if !strings.Contains(got, f) {
			t.Errorf("procSignalState: %q lacks %s", got, f)
		}
	}
	if got := procSignalState(-1); got == "" {
		t.Error("procSignalState of a missing pid is empty, want the error")
	}
}

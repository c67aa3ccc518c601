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

	"github.com/berth-sh/berth/internal/errdefs"
)

func running(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != 'Z'
}

// startTree starts a shell whose child leaves the process group with
// setsid, and returns the shell's pid, the escaped child's pid and the
// shell's exit channel.
func startTree(t *testing.T, r *Reaper) (int, int, <-chan Exit) {
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
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	// setsid(1) execs sleep once it has left the group; wait for that so
	// the test probes the escaped process, not setsid in flight.
	for i := 0; i < 1000; i++ {
		if pgid, _ := syscall.Getpgid(child); pgid == child {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pid, child, ch
}

func TestKillTreeReachesEscapedDescendants(t *testing.T) {
	r := NewReaper(false)
	defer r.Stop()

	// Negative control: killing only the process group (what most exec
	// implementations do) leaves the setsid child running.
	pid, child, ch := startTree(t, r)
	syscall.Kill(-pid, syscall.SIGKILL)
	<-ch
	if !running(child) {
		t.Fatal("negative control: the setsid child died with its process group; the probe cannot tell killTree works")
	}
	syscall.Kill(child, syscall.SIGKILL)

	pid, child, ch = startTree(t, r)
	killTree(pid)
	e := <-ch
	if !e.Status.Signaled() || e.Status.Signal() != syscall.SIGKILL {
		t.Fatalf("root status %v", e.Status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for running(child) {
		if time.Now().After(deadline) {
			t.Fatalf("setsid descendant %d survived killTree", child)
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

func TestResolvePath(t *testing.T) {
	cases := []struct {
		in, want string
		bad      bool
	}{
		{"/etc/passwd", "/etc/passwd", false},
		{"notes.txt", "/home/u/notes.txt", false},
		{"../../../etc", "/etc", false}, // lexical; the kernel confines it to the sandbox root anyway
		{"/a/./b//c/", "/a/b/c", false},
		{"", "", true},
		{"a\x00b", "", true},
		{"\xff\xfe", "", true},
		{"/" + strings.Repeat("a", 4096), "", true},
	}
	for _, tc := range cases {
		got, err := resolvePath(tc.in, "/home/u")
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("resolvePath(%q) = %q, %v", tc.in, got, err)
		}
		if tc.bad && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("resolvePath(%q): kind %v", tc.in, err)
		}
	}
}

func TestFsErrorKinds(t *testing.T) {
	cases := map[syscall.Errno]error{
		syscall.ENOENT:    errdefs.ErrNotFound,
		syscall.EEXIST:    errdefs.ErrAlreadyExists,
		syscall.ENOTDIR:   errdefs.ErrInvalidArgument,
		syscall.EISDIR:    errdefs.ErrInvalidArgument,
		syscall.EACCES:    errdefs.ErrPermissionDenied,
		syscall.EPERM:     errdefs.ErrPermissionDenied,
		syscall.ENOSPC:    errdefs.ErrResourceExhausted,
		syscall.EDQUOT:    errdefs.ErrResourceExhausted,
		syscall.ENOTEMPTY: errdefs.ErrFailedPrecondition,
	}
	for errno, kind := range cases {
		err := fsError("write", "/x", &os.PathError{Op: "open", Path: "/x", Err: errno})
		if !errors.Is(err, kind) {
			t.Errorf("%v: got %v", errno, err)
		}
	}
	if err := fsError("write", "/x", syscall.ENOSPC); !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("ENOSPC message: %v", err)
	}
}

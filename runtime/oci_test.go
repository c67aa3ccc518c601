package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t, []string{"/bin/sleep", "1000"}, nil)
	r := c.r
	s := c.waitStatus(t, "created", time.Second)
	if s.Pid <= 0 || s.Bundle != c.bundle || s.ID != c.id {
		t.Errorf("created state = %+v", s)
	}
	if err := r.Create(ctx, c.id, c.bundle); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second create: %v, want already exists", err)
	}
	if err := r.Start(ctx, c.id); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "running", time.Second)

	if err := r.Pause(ctx, c.id); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "paused", time.Second)
	if err := r.Resume(ctx, c.id); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "running", time.Second)
	if err := r.Update(ctx, c.id, Limits{MemoryBytes: 128 << 20, Pids: 64}); err != nil {
		t.Errorf("update: %v", err)
	}

	ss, err := r.List(ctx)
	if err != nil || !slices.ContainsFunc(ss, func(s State) bool { return s.ID == c.id }) {
		t.Errorf("List = %v, %v", ss, err)
	}
	if err := r.Delete(ctx, c.id, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("delete of a running container without force: %v", err)
	}
	if err := r.Kill(ctx, c.id, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "stopped", 5*time.Second)
	if err := r.Kill(ctx, c.id, syscall.SIGKILL); err != nil {
		t.Errorf("kill of a stopped container: %v, want nil", err)
	}
	if err := r.Delete(ctx, c.id, false); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, c.id, true); err != nil {
		t.Errorf("second delete: %v, want nil", err)
	}
	if _, err := r.State(ctx, c.id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("state after delete: %v, want not found", err)
	}
	if err := r.Kill(ctx, c.id, syscall.SIGTERM); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("kill of unknown: %v, want not found", err)
	}
	if _, err := OOMKilled(c.id, c.cgroupsPath); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("OOMKilled after delete: %v, want not found (cgroup removed)", err)
	}
}

func TestCreateErrorCarriesRuntimeMessage(t *testing.T) {
	needFixtures(t)
	ctx := context.Background()
	bundle := filepath.Join(t.TempDir(), "bundle")
	rootfs := mountOverlay(t, bundle)
	s, err := Spec(SpecOptions{ID: "bad", RootfsPath: rootfs, Args: []string{"/no-such-binary"}, CgroupsPath: fx.cgParent + "/bad"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(bundle, s); err != nil {
		t.Fatal(err)
	}
	r := New(fx.runc, fx.runcRoot)
	defer r.Delete(ctx, "bad", true)
	err = r.Create(ctx, "bad", bundle)
	if err == nil {
		t.Fatal("create with a missing binary succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-binary") || len(err.Error()) > 4*maxErrTail {
		t.Errorf("error should carry runc's (bounded) reason: %v", err)
	}
	if err := r.Create(ctx, "../x", bundle); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad id: %v", err)
	}
}

func TestOOMKilled(t *testing.T) {
	c := newContainer(t, []string{"/probe", "oom"}, func(o *SpecOptions) { o.Limits.MemoryBytes = 32 << 20 })
	out := c.run(t, 30*time.Second)
	if strings.Contains(out, "survived") || !strings.Contains(out, "allocated") {
		t.Fatalf("hog was not stopped by a 32 MiB limit:\n%s", out)
	}
	killed, err := OOMKilled(c.id, c.cgroupsPath)
	if err != nil || !killed {
		t.Errorf("OOMKilled = %v, %v; want true (cgroup v2: %v)", killed, err, Unified())
	}

	// Negative control: a container that exits by itself is not OOM-killed.
	ok := newContainer(t, []string{"/probe", "true"}, func(o *SpecOptions) { o.Limits.MemoryBytes = 32 << 20 })
	ok.run(t, 10*time.Second)
	if killed, err := OOMKilled(ok.id, ok.cgroupsPath); err != nil || killed {
		t.Errorf("clean exit: OOMKilled = %v, %v; want false", killed, err)
	}
}

// forkCount parses the probe's "forked N" / "stopped N ERR" lines.
func forkCount(out string) (n int, stopped string) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "forked" || f[0] == "stopped") {
			var k int
			for _, ch := range f[1] {
				k = k*10 + int(ch-'0')
			}
			n = k
			if f[0] == "stopped" && len(f) > 2 {
				stopped = f[2]
			}
		}
	}
	return n, stopped
}

func TestPidsLimit(t *testing.T) {
	const limit = 16
	c := newContainer(t, []string{"/probe", "forks", "200"}, func(o *SpecOptions) { o.Limits.Pids = limit })
	if err := c.r.Start(context.Background(), c.id); err != nil {
		t.Fatal(err)
	}
	var out string
	deadline := time.Now().Add(20 * time.Second)
	for {
		out = c.output(t)
		if strings.Contains(out, "stopped") || strings.Contains(out, "unbounded") || strings.Contains(out, "failed to create new OS thread") {
			break
		}
		if s, _ := c.r.State(context.Background(), c.id); s.Status == "stopped" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	out = c.output(t) // the probe may have crashed between the read and the state check
	n, why := forkCount(out)
	t.Logf("fork bomb under pids.max=%d: %d children, stop reason %q", limit, n, why)
	if n >= limit || strings.Contains(out, "unbounded") {
		t.Errorf("%d forks succeeded under a pids limit of %d:\n%s", n, limit, out)
	}
	if why != "EAGAIN" && !strings.Contains(out, "failed to create new OS thread") {
		t.Errorf("bomb did not stop on the pids limit (EAGAIN):\n%s", out)
	}

	// Negative control: without the limit the same bomb gets all 40 children.
	free := newContainer(t, []string{"/probe", "forks", "40"}, func(o *SpecOptions) { o.Limits.Pids = 0 })
	out = free.run(t, 20*time.Second)
	if n, _ := forkCount(out); n != 40 {
		t.Errorf("without a pids limit only %d of 40 forks succeeded:\n%s", n, out)
	}
}

func TestCleanupCgroups(t *testing.T) {
	ctx := context.Background()
	// Nested under the suite's parent, so TestMain's cleanup also removes
	// whatever a failing run leaves.
	gone := newContainer(t, []string{"/bin/sleep", "1000"}, func(o *SpecOptions) { o.CgroupsPath = fx.cgParent + "/cleanup/" + o.ID })
	kept := newContainer(t, []string{"/bin/sleep", "1000"}, func(o *SpecOptions) { o.CgroupsPath = fx.cgParent + "/cleanup/" + o.ID })
	for _, c := range []*ctr{gone, kept} {
		if err := c.r.Start(ctx, c.id); err != nil {
			t.Fatal(err)
		}
	}
	if err := gone.r.Pause(ctx, gone.id); err != nil { // frozen cgroups must still be cleaned
		t.Fatal(err)
	}
	pid := gone.waitStatus(t, "paused", time.Second).Pid
	if err := CleanupCgroups(fx.cgParent+"/cleanup", map[string]bool{kept.id: true}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		// A zombie until runc reaps it is fine; a live process is not.
		st, _ := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
		if !strings.Contains(string(st), ") Z ") {
			t.Errorf("process %d of the cleaned cgroup still alive: %s", pid, st)
		}
	}
	roots, _ := hierarchies()
	if len(roots) == 0 {
		t.Fatal("no cgroup hierarchies found")
	}
	for _, root := range roots {
		if _, err := os.Stat(filepath.Join(root, gone.cgroupsPath)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left in %s", gone.cgroupsPath, root)
		}
	}
	kept.waitStatus(t, "running", time.Second)
	if err := CleanupCgroups("/", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("cleanup of / must be refused: %v", err)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Root-test fixtures, prepared once by TestMain when running as root.
var (
	fx struct {
		ready     bool
		skip      string // why root tests skip
		runc      string
		runcRoot  string
		lower     string // busybox + probe, read-only lower layer
		cgParent  string
		tmp       string
		idCounter atomic.Int64
	}
)

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() != 0 {
			fx.skip = "needs root (runc, cgroups, mounts)"
			return m.Run()
		}
		if err := setupFixtures(); err != nil {
			fmt.Fprintln(os.Stderr, "runtime test fixtures:", err)
			return 1
		}
		defer teardownFixtures()
		return m.Run()
	}()
	os.Exit(code)
}

func setupFixtures() error {
	tmp, err := os.MkdirTemp("", "berth-runtime-test")
	if err != nil {
		return err
	}
	fx.tmp = tmp
	fx.runcRoot = filepath.Join(tmp, "runc-state")
	fx.cgParent = fmt.Sprintf("/berth-test-%d", os.Getpid())
	if fx.runc, err = findRunc(tmp); err != nil {
		return err
	}
	fx.lower = filepath.Join(tmp, "lower")
	if err := buildRootfs(fx.lower); err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(fx.lower, "probe"), "./testdata/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build probe: %v\n%s", err, out)
	}
	fx.ready = true
	return nil
}

// findRunc prefers $BERTH_RUNC, then the repo's bin/runc (built with the
// seccomp tag), and builds the pinned runc from go.mod as a last resort.
func findRunc(tmp string) (string, error) {
	if p := os.Getenv("BERTH_RUNC"); p != "" {
		return p, nil
	}
	if p, err := filepath.Abs("../bin/runc"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	out := filepath.Join(tmp, "runc")
	cmd := exec.Command("go", "build", "-tags", "seccomp", "-o", out, "github.com/opencontainers/runc")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("no runc: set BERTH_RUNC or build bin/runc: %v\n%s", err, b)
	}
	return out, nil
}

// buildRootfs makes a tiny rootfs from the host's static busybox.
func buildRootfs(dir string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not installed: %w", err)
	}
	for _, d := range []string{"bin", "etc", "tmp", "proc", "sys", "dev", "mnt"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
	b, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), b, 0o755); err != nil {
		return err
	}
	for _, l := range []string{"sh", "sleep", "true", "cat", "ls", "echo", "dd"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", l)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/:/bin/sh\n"), 0o644)
}

func teardownFixtures() {
	r := New(fx.runc, fx.runcRoot)
	ctx := context.Background()
	if ss, err := r.List(ctx); err == nil {
		for _, s := range ss {
			r.Delete(ctx, s.ID, true)
		}
	}
	CleanupCgroups(fx.cgParent, nil)
	if roots, err := hierarchies(); err == nil {
		for _, root := range roots {
			unix.Rmdir(filepath.Join(root, fx.cgParent))
		}
	}
	os.RemoveAll(fx.tmp)
}

func needFixtures(t *testing.T) {
	t.Helper()
	if fx.skip != "" {
		t.Skip(fx.skip)
	}
	if !fx.ready {
		t.Fatal("fixtures not ready")
	}
}

type ctr struct {
	id, bundle, cgroupsPath string
	r                       *OCI
}

// newContainer creates (not starts) a container running args over an overlay
// of the busybox lower, with opts adjusted by mut. Cleanup deletes it and
// unmounts its rootfs.
func newContainer(t *testing.T, args []string, mut func(*SpecOptions)) *ctr {
	t.Helper()
	needFixtures(t)
	return newContainerAt(t, "", args, mut)
}

// newContainerAt is newContainer over an existing rootfs ("" = a fresh
// overlay of the busybox lower).
func newContainerAt(t *testing.T, rootfs string, args []string, mut func(*SpecOptions)) *ctr {
	t.Helper()
	c := newBundle(t, rootfs, args, mut)
	if err := c.r.Create(context.Background(), c.id, c.bundle); err != nil {
		t.Fatal(err)
	}
	return c
}

// newBundle writes c's bundle (over rootfs, "" = a fresh overlay of the
// busybox lower) and removes its container at cleanup, but creates nothing.
func newBundle(t *testing.T, rootfs string, args []string, mut func(*SpecOptions)) *ctr {
	t.Helper()
	id := fmt.Sprintf("t%d-%d", os.Getpid(), fx.idCounter.Add(1))
	bundle := filepath.Join(t.TempDir(), "bundle")
	if rootfs == "" {
		rootfs = mountOverlay(t, bundle)
	}
	o := SpecOptions{
		ID: id, RootfsPath: rootfs, Args: args,
		CgroupsPath: fx.cgParent + "/" + id,
		Limits:      Limits{MilliCPU: 1000, MemoryBytes: 256 << 20, Pids: 256},
	}
	if mut != nil {
		mut(&o)
	}
	s, err := Spec(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(bundle, s); err != nil {
		t.Fatal(err)
	}
	c := &ctr{id: id, bundle: bundle, cgroupsPath: o.CgroupsPath, r: New(fx.runc, fx.runcRoot)}
	t.Cleanup(func() {
		if err := c.r.Delete(context.Background(), id, true); err != nil {
			t.Errorf("cleanup delete %s: %v", id, err)
		}
	})
	return c
}

func mountOverlay(t *testing.T, bundle string) string {
	t.Helper()
	rootfs := filepath.Join(bundle, "rootfs")
	upper, work := filepath.Join(bundle, "upper"), filepath.Join(bundle, "work")
	for _, d := range []string{rootfs, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + fx.lower + ",upperdir=" + upper + ",workdir=" + work + ",index=off"
	if err := unix.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(rootfs, unix.MNT_DETACH) })
	return rootfs
}

// run starts c and waits until it stops, returning its output.
func (c *ctr) run(t *testing.T, timeout time.Duration) string {
	t.Helper()
	if err := c.r.Start(context.Background(), c.id); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "stopped", timeout)
	return c.output(t)
}

func (c *ctr) output(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(c.bundle, AgentLog))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (c *ctr) waitStatus(t *testing.T, want string, timeout time.Duration) State {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := c.r.State(context.Background(), c.id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status == want {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s is %q after %v, want %q; output:\n%s", c.id, s.Status, timeout, want, c.output(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lastJSONLine returns the last line of out that looks like a JSON object.
func lastJSONLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			return lines[i]
		}
	}
	return ""
}

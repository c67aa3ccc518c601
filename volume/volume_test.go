package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/store/sqlite"
)

func openTest(t *testing.T, live func(context.Context, string) bool) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, btrfs)")
	}
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := Open(context.Background(), dir, st, Options{ImageSize: 1 << 30, Node: "n1", Live: live})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return m
}

// fakeRoot is a directory standing in for a sandbox's root filesystem
// (no id map: the test runs as host root).
func fakeRoot(t *testing.T) string {
	r := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(r, 0o755); err != nil {
		t.Fatal(err)
	}
	// A failed test must not leave mounts under its temp dir.
	t.Cleanup(func() { unmountUnder(r) })
	return r
}

func detachAll(t *testing.T, m *Manager, sb, root string, ms []api.VolumeMount) {
	t.Helper()
	if err := m.Detach(context.Background(), sb, root, ms); err != nil {
		t.Fatalf("detach %s: %v", sb, err)
	}
}

func TestVolumeLifecycle(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, nil)
	if _, err := m.Create(ctx, "../x", 0); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad name: want invalid argument, got %v", err)
	}
	v, err := m.Create(ctx, "data", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if v.SizeBytes != 64<<20 || v.Node != "n1" {
		t.Fatalf("created: %+v", v)
	}
	if _, err := m.Create(ctx, "data", 0); !errdefs.IsKind(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("double create: %v", err)
	}

	// A writes through its mount; a snapshot then sees that content, and
	// not what A writes afterwards.
	rootA := fakeRoot(t)
	msA := []api.VolumeMount{{Name: "data", Path: "/mnt/data"}}
	if err := m.Attach(ctx, "a", "", rootA, msA, zeroMap); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(rootA, "mnt/data/f"), "one")
	if _, err := m.Snapshot(ctx, "data", "data-s1"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(rootA, "mnt/data/f"), "two")

	// A second writer is refused, naming the holder; a reader is not.
	rootB := fakeRoot(t)
	err = m.Attach(ctx, "b", "", rootB, []api.VolumeMount{{Name: "data", Path: "/data"}}, zeroMap)
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("second writer: want failed precondition naming a, got %v", err)
	}
	if isMountRoot(t, filepath.Join(rootB, "data")) {
		t.Fatal("refused attach left a mount")
	}
	msB := []api.VolumeMount{{Name: "data-s1", Path: "/snap", ReadOnly: true}, {Name: "data", Path: "/live", ReadOnly: true}}
	if err := m.Attach(ctx, "b", "", rootB, msB, zeroMap); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(rootB, "snap/f")); got != "one" {
		t.Fatalf("snapshot content %q, want one", got)
	}
	if got := read(t, filepath.Join(rootB, "live/f")); got != "two" {
		t.Fatalf("live read-only content %q, want two", got)
	}
	if err := os.WriteFile(filepath.Join(rootB, "snap/g"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write to read-only mount: want EROFS, got %v", err)
	}
	// A snapshot never mounts read-write.
	if err := m.Attach(ctx, "c", "", fakeRoot(t), []api.VolumeMount{{Name: "data-s1", Path: "/s"}}, zeroMap); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("rw snapshot: %v", err)
	}

	// In use: rm refused.
	if err := m.Remove(ctx, "data"); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("rm in use: %v", err)
	}
	got, _ := m.Get(ctx, "data")
	if got.Writer != "a" || len(got.Readers) != 1 || got.Readers[0] != "b" {
		t.Fatalf("claims: %+v", got)
	}

	// A detaches; now B may write, and reads what A wrote.
	detachAll(t, m, "a", rootA, msA)
	if isMountRoot(t, filepath.Join(rootA, "mnt/data")) {
		t.Fatal("detach left A's mount")
	}
	detachAll(t, m, "b", rootB, msB)
	rootB2 := fakeRoot(t)
	msB2 := []api.VolumeMount{{Name: "data", Path: "/data"}}
	if err := m.Attach(ctx, "b", "", rootB2, msB2, zeroMap); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(rootB2, "data/f")); got != "two" {
		t.Fatalf("B reads %q, want two", got)
	}

	// Fork is independent both ways.
	if _, err := m.Fork(ctx, "data", "data-f", 0); err != nil {
		t.Fatal(err)
	}
	rootC := fakeRoot(t)
	msC := []api.VolumeMount{{Name: "data-f", Path: "/f"}}
	if err := m.Attach(ctx, "c", "", rootC, msC, zeroMap); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(rootC, "f/f"), "fork")
	write(t, filepath.Join(rootB2, "data/f"), "three")
	if a, b := read(t, filepath.Join(rootC, "f/f")), read(t, filepath.Join(rootB2, "data/f")); a != "fork" || b != "three" {
		t.Fatalf("fork not independent: fork %q, origin %q", a, b)
	}
	detachAll(t, m, "b", rootB2, msB2)
	detachAll(t, m, "c", rootC, msC)

	// rm of the origin keeps the snapshot and the fork.
	if err := m.Remove(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "data"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("after rm: %v", err)
	}
	list, err := m.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "data-f" || list[1].Name != "data-s1" || !list[1].Snapshot {
		t.Fatalf("list after rm: %+v %v", list, err)
	}
}

var zeroMap = rootfs.IDMap{}

func TestQuotaHolds(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, nil)
	if _, err := m.Create(ctx, "q", 32<<20); err != nil {
		t.Fatal(err)
	}
	root := fakeRoot(t)
	ms := []api.VolumeMount{{Name: "q", Path: "/q"}}
	if err := m.Attach(ctx, "a", "", root, ms, zeroMap); err != nil {
		t.Fatal(err)
	}
	defer detachAll(t, m, "a", root, ms)
	n, err := fill(filepath.Join(root, "q/big"), 64<<20)
	if !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("write of 64 MiB into a 32 MiB volume: want EDQUOT/ENOSPC, got %v after %d bytes", err, n)
	}
	if n > 33<<20 {
		t.Fatalf("wrote %d bytes past a 32 MiB quota", n)
	}
	// Negative control: a write below the quota succeeds.
	os.Remove(filepath.Join(root, "q/big"))
	unix.Sync()
	if n, err := fill(filepath.Join(root, "q/small"), 4<<20); err != nil {
		t.Fatalf("4 MiB write under the quota failed after %d bytes: %v", n, err)
	}
	unix.Sync()
	v, err := m.Get(ctx, "q")
	if err != nil || v.UsedBytes < 4<<20 || v.UsedBytes > 32<<20 {
		t.Fatalf("usage: %+v %v", v, err)
	}
}

func TestStaleWriterTakenOver(t *testing.T) {
	ctx := context.Background()
	dead := map[string]bool{}
	m := openTest(t, func(_ context.Context, sb string) bool { return !dead[sb] })
	if _, err := m.Create(ctx, "d", 0); err != nil {
		t.Fatal(err)
	}
	ms := []api.VolumeMount{{Name: "d", Path: "/d"}}
	rootA, rootB := fakeRoot(t), fakeRoot(t)
	if err := m.Attach(ctx, "a", "", rootA, ms, zeroMap); err != nil {
		t.Fatal(err)
	}
	defer detachAll(t, m, "a", rootA, ms)
	if err := m.Attach(ctx, "b", "", rootB, ms, zeroMap); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("live writer: %v", err)
	}
	dead["a"] = true // a crashed without releasing
	if err := m.Attach(ctx, "b", "", rootB, ms, zeroMap); err != nil {
		t.Fatalf("stale writer not taken over: %v", err)
	}
	detachAll(t, m, "b", rootB, ms)
}

func TestTenantIsolation(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, nil)
	if _, err := m.Create(ctx, "mine", 0); err != nil {
		t.Fatal(err)
	}
	// A sandbox of another tenant cannot mount it; the owner's can.
	if err := m.Attach(ctx, "x", "other", fakeRoot(t), []api.VolumeMount{{Name: "mine", Path: "/m"}}, zeroMap); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("other tenant: want not found, got %v", err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fill(p string, n int) (int, error) {
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	w := 0
	for w < n {
		k, err := f.Write(buf)
		w += k
		if err != nil {
			return w, err
		}
	}
	err = f.Sync()
	return w, err
}

func isMountRoot(t *testing.T, p string) bool {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO, &st); err != nil {
		return false
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			_ = unix.Unmount(f[4], unix.MNT_DETACH)
		}
	}
}

// TestForkUsage pins down what the docs say a fork's usage is: under
// simple quotas (the mode berth prefers) a fork is charged only for what
// it writes; under full qgroups it is charged for what it shares too.
func TestForkUsage(t *testing.T) {
	ctx := context.Background()
	m := openTest(t, nil)
	if _, err := m.Create(ctx, "o", 64<<20); err != nil {
		t.Fatal(err)
	}
	root := fakeRoot(t)
	ms := []api.VolumeMount{{Name: "o", Path: "/o"}}
	if err := m.Attach(ctx, "a", "", root, ms, zeroMap); err != nil {
		t.Fatal(err)
	}
	if n, err := fill(filepath.Join(root, "o/data"), 16<<20); err != nil {
		t.Fatalf("fill after %d bytes: %v", n, err)
	}
	detachAll(t, m, "a", root, ms)
	unix.Sync()
	if _, err := m.Fork(ctx, "o", "f", 0); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	o, _ := m.Get(ctx, "o")
	f, _ := m.Get(ctx, "f")
	mode, _ := os.ReadFile(filepath.Join("/sys/fs/btrfs", fsUUID(t, m.mnt), "qgroups/mode"))
	t.Logf("quota mode %q: origin uses %d bytes, fork %d", strings.TrimSpace(string(mode)), o.UsedBytes, f.UsedBytes)
	if o.UsedBytes < 16<<20 {
		t.Fatalf("origin usage %d, want >= 16 MiB", o.UsedBytes)
	}
	switch strings.TrimSpace(string(mode)) {
	case "squota":
		if f.UsedBytes > 1<<20 {
			t.Fatalf("simple quotas: a fresh fork is charged %d bytes, want ~0", f.UsedBytes)
		}
	case "qgroup":
		if f.UsedBytes < 16<<20 {
			t.Fatalf("full qgroups: a fork's referenced bytes %d, want >= 16 MiB", f.UsedBytes)
		}
	}
}

func fsUUID(t *testing.T, mnt string) string {
	t.Helper()
	// The filesystem's sysfs directory is named by its fsid (the UUID
	// for a single-device filesystem); find the one whose devices list
	// holds the loop device backing mnt.
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var dev string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 9 && f[4] == mnt {
			for i, x := range f {
				if x == "-" && i+2 < len(f) {
					dev = filepath.Base(f[i+2])
				}
			}
		}
	}
	ents, _ := os.ReadDir("/sys/fs/btrfs")
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join("/sys/fs/btrfs", e.Name(), "devices", dev)); err == nil && dev != "" {
			return e.Name()
		}
	}
	return "unknown"
}

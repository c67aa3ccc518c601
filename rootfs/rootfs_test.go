package rootfs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, btrfs, overlay mounts)")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Fatalf("mkfs.btrfs not installed (apt-get install btrfs-progs): %v", err)
	}
}

// openTest opens a Manager on a fresh data dir with a small image and
// unmounts everything when the test ends.
func openTest(t *testing.T) (*Manager, string) {
	t.Helper()
	needRoot(t)
	dir := t.TempDir()
	m, err := Open(context.Background(), dir, Options{UpperSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		m.Close()
	})
	return m, dir
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// twoLayers builds a base layer and a layer on top of it that deletes /b
// (overlay whiteout: a 0/0 char device) and adds /c.
func twoLayers(t *testing.T) []string {
	base, top := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(base, "a"), "a-from-base")
	writeFile(t, filepath.Join(base, "b"), "b-from-base")
	writeFile(t, filepath.Join(base, "dir/x"), "x")
	writeFile(t, filepath.Join(top, "c"), "c-from-top")
	writeFile(t, filepath.Join(top, "a"), "a-from-top")
	if err := unix.Mknod(filepath.Join(top, "b"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	return []string{base, top} // lowest first
}

func TestMountLayersAndKeepUpper(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	lowers := twoLayers(t)
	root, err := m.Mount(ctx, "sb1", lowers, 64<<20, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "a")); got != "a-from-top" {
		t.Errorf("a = %q, want the top layer's copy (lowers must be reversed for overlay)", got)
	}
	if got := readFile(t, filepath.Join(root, "dir/x")); got != "x" {
		t.Errorf("dir/x = %q", got)
	}
	if got := readFile(t, filepath.Join(root, "c")); got != "c-from-top" {
		t.Errorf("c = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("b should be hidden by the top layer's whiteout, lstat err = %v", err)
	}
	writeFile(t, filepath.Join(root, "new"), "written")
	if err := os.Remove(filepath.Join(root, "dir/x")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(m.UpperDir("sb1"), "new")); got != "written" {
		t.Errorf("write did not land in the upper dir: %q", got)
	}
	if st, err := os.Lstat(filepath.Join(m.UpperDir("sb1"), "dir/x")); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("deleting a lower file should leave a whiteout in upper: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(lowers[0], "dir/x")); err != nil {
		t.Errorf("lower layer was modified: %v", err)
	}

	// Idempotent mount, then Mounted/Known.
	if again, err := m.Mount(ctx, "sb1", lowers, 64<<20, IDMap{}); err != nil || again != root {
		t.Fatalf("second Mount = %q, %v", again, err)
	}
	if _, err := m.Mount(ctx, "sb1", lowers[:1], 64<<20, IDMap{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("mount with different lowers while mounted: err = %v, want failed precondition", err)
	}
	if ids, _ := m.Mounted(ctx); strings.Join(ids, ",") != "sb1" {
		t.Errorf("Mounted = %v", ids)
	}

	// Sleep/wake: unmount keeps the upper; a later mount sees the files.
	if err := m.Unmount(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Unmount(ctx, "sb1"); err != nil {
		t.Fatalf("second Unmount: %v", err)
	}
	if ids, _ := m.Mounted(ctx); len(ids) != 0 {
		t.Errorf("Mounted after unmount = %v", ids)
	}
	if _, err := m.Mount(ctx, "sb1", lowers, 64<<20, IDMap{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "new")); got != "written" {
		t.Errorf("after remount: new = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(root, "dir/x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after remount the deleted file came back: %v", err)
	}
	if ids, _ := m.Known(ctx); strings.Join(ids, ",") != "sb1" {
		t.Errorf("Known = %v", ids)
	}

	// Remove is complete and idempotent.
	if err := m.Remove(ctx, "sb1"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "sb1"); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if ids, _ := m.Known(ctx); len(ids) != 0 {
		t.Errorf("Known after remove = %v", ids)
	}
	if exists(root) {
		t.Errorf("rootfs mount point left behind")
	}
}

func TestReopenRemountsImage(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	m, err := Open(ctx, dir, Options{UpperSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dir, Options{UpperSize: 1 << 30}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("second Open of the same dir: %v, want failed precondition", err)
	}
	lowers := twoLayers(t)
	root, err := m.Mount(ctx, "keep", lowers, 32<<20, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "f"), "survives")
	if err := m.Shutdown(ctx); err != nil { // unmounts overlay and the image (as a reboot would)
		t.Fatal(err)
	}
	m.Close()
	if isBtrfs(filepath.Join(dir, "uppers")) {
		t.Fatal("uppers still mounted after Shutdown")
	}
	m, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Shutdown(ctx); m.Close() }()
	if _, err := m.Mount(ctx, "keep", lowers, 32<<20, IDMap{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "f")); got != "survives" {
		t.Errorf("f = %q", got)
	}
}

// fill writes up to n bytes of zeros to p and returns how much was written
// and the error that stopped it.
func fill(p string, n int64) (int64, error) {
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	var w int64
	for w < n {
		k, err := f.Write(buf)
		w += int64(k)
		if err != nil {
			f.Close()
			return w, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return w, err
	}
	return w, f.Close()
}

func hostFree(t *testing.T, p string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

func TestDiskLimit(t *testing.T) {
	m, dir := openTest(t)
	ctx := context.Background()
	lowers := twoLayers(t)
	const limit = 64 << 20
	const slack = 16 << 20

	root, err := m.Mount(ctx, "full", lowers, limit, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	// The host-side cost of the sandbox's writes is the growth of the
	// sparse image's allocation; df on the shared host disk is logged too
	// but is not asserted (other processes write to it concurrently).
	img := filepath.Join(dir, "uppers.img")
	before, freeBefore := allocated(t, img), hostFree(t, dir)
	w, err := fill(filepath.Join(root, "big"), 2*limit)
	if !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing 2x the limit: wrote %d bytes, err = %v; want EDQUOT or ENOSPC", w, err)
	}
	if w > limit {
		t.Errorf("wrote %d bytes past a %d-byte limit", w, limit)
	}
	unix.Sync()
	used := allocated(t, img) - before
	t.Logf("limited: wrote %d MiB before %v; image grew %d MiB; host df free dropped %d MiB", w>>20, err, used>>20, (freeBefore-hostFree(t, dir))>>20)
	if used > limit+slack {
		t.Errorf("host space used grew by %d bytes, more than limit+slack %d", used, limit+slack)
	}

	// The sandbox can delete and write again (the quota is released).
	if err := os.Remove(filepath.Join(root, "big")); err != nil {
		t.Fatal(err)
	}
	if _, err := fill(filepath.Join(root, "small"), 1<<20); err != nil {
		t.Errorf("write after freeing space: %v", err)
	}

	// Raising the limit on a mounted sandbox takes effect (resize).
	if _, err := m.Mount(ctx, "full", lowers, 4*limit, IDMap{}); err != nil {
		t.Fatal(err)
	}
	if w, err := fill(filepath.Join(root, "big2"), 2*limit); err != nil {
		t.Errorf("after raising the limit, writing %d bytes failed at %d: %v", 2*limit, w, err)
	}

	// Negative control: the same write without a quota goes past the limit
	// and the image grows past limit+slack, so both assertions above are
	// about the quota, not about the image size or the measurement.
	root2, err := m.Mount(ctx, "nolimit", lowers, 0, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	before = allocated(t, img)
	if w, err := fill(filepath.Join(root2, "big"), 2*limit); err != nil || w != 2*limit {
		t.Errorf("without quota: wrote %d bytes, err = %v; want the full %d", w, err, 2*limit)
	}
	unix.Sync()
	if grew := allocated(t, img) - before; grew <= limit+slack {
		t.Errorf("without quota the image grew only %d bytes; the host-space measurement is blind", grew)
	}
}

// allocated is the host disk space a (sparse) file occupies.
func allocated(t *testing.T, p string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func TestMountRejectsBadInput(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	lowers := twoLayers(t)
	for _, id := range []string{"", "..", "a/b", "../x", "a\x00b", strings.Repeat("x", 200)} {
		if _, err := m.Mount(ctx, id, lowers, 0, IDMap{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("id %q: err = %v, want invalid argument", id, err)
		}
	}
	comma := filepath.Join(t.TempDir(), "a,upperdir=x")
	if err := os.Mkdir(comma, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Mount(ctx, "inj", []string{comma}, 0, IDMap{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("lower with a comma: err = %v, want invalid argument", err)
	}
	if _, err := m.Mount(ctx, "none", nil, 0, IDMap{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no lowers: err = %v", err)
	}
	// A lowerdir list longer than a page is refused with a clear error.
	var many []string
	for i := 0; i < 200; i++ {
		many = append(many, lowers[0])
	}
	_, err := m.Mount(ctx, "many", many, 0, IDMap{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "mount limit") {
		t.Errorf("200 layers: err = %v", err)
	}
	m.Remove(ctx, "many")
}

// TestInodeExhaustionHitsQuota: btrfs has no inode quota, but metadata is
// charged to the quota group, so a flood of empty files stops at the byte
// limit (checklist #21) instead of filling the shared filesystem.
func TestInodeExhaustionHitsQuota(t *testing.T) {
	m, _ := openTest(t)
	root, err := m.Mount(context.Background(), "inodes", twoLayers(t), 1<<20, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	const max = 200000
	for i := 0; i < max; i++ {
		f, err := os.Create(filepath.Join(root, "f"+strconv.Itoa(i)))
		if err != nil {
			if !errors.Is(err, unix.EDQUOT) && !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("file %d: %v, want EDQUOT", i, err)
			}
			t.Logf("stopped after %d empty files: %v", i, err)
			return
		}
		f.Close()
	}
	t.Fatalf("created %d empty files under a 1 MiB quota", max)
}

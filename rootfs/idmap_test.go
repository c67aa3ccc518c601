package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestIDMappedOverlay: with an id map, the sandbox's view shows on-disk id k
// as host id HostID+k, and what is written through the view lands on disk
// with the sandbox's own ids (so snapshots of the upper record in-sandbox
// ids). The negative control is the same mount without a map.
func TestIDMappedOverlay(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	lowers := twoLayers(t)
	const host = 300000
	root, err := m.Mount(ctx, "idm", lowers, 64<<20, IDMap{HostID: host, Size: 65536})
	if err != nil {
		t.Fatal(err)
	}
	uidOf := func(p string) uint32 {
		t.Helper()
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}
	if got := uidOf(filepath.Join(root, "a")); got != host {
		t.Fatalf("lower file seen as uid %d, want %d", got, host)
	}
	if got := uidOf(root); got != host {
		t.Fatalf("root dir seen as uid %d, want %d", got, host)
	}
	if err := os.Lchown(filepath.Join(root, "dir/x"), host+1000, host+1000); err != nil {
		t.Fatal(err)
	}
	if got := uidOf(filepath.Join(m.UpperDir("idm"), "dir/x")); got != 1000 {
		t.Fatalf("copied-up file has on-disk uid %d, want the in-sandbox 1000", got)
	}
	// Lower layers are read-only through their views.
	if err := os.WriteFile(filepath.Join(m.idmapDir("idm"), "l", "0", "a"), []byte("x"), 0o644); err == nil {
		t.Fatal("lower view is writable")
	}
	ids, err := m.Mounted(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "idm" {
		t.Fatalf("Mounted = %v, %v", ids, err)
	}
	if err := m.Unmount(ctx, "idm"); err != nil {
		t.Fatal(err)
	}
	ms, _ := mounts()
	for _, e := range ms {
		if hasPathPrefix(e.Point, filepath.Join(m.sandboxes, "idm")) {
			t.Fatalf("left mounted: %s", e.Point)
		}
	}
	// Negative control: no map, host root sees the on-disk ids.
	root, err = m.Mount(ctx, "idm", lowers, 64<<20, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	if got := uidOf(filepath.Join(root, "a")); got != 0 {
		t.Fatalf("unmapped mount shows uid %d", got)
	}
}

// TestUnmountLegacyMountPoint: a rootfs an older berth mounted under
// <data>/sandboxes/<id>/rootfs is unmounted too once mount points live in
// MountDir (an adopted sandbox going to sleep after an upgrade).
func TestUnmountLegacyMountPoint(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m, err := Open(context.Background(), dir, Options{UpperSize: 1 << 30, MountDir: filepath.Join(t.TempDir(), "mnt")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()); m.Close() })
	legacy := filepath.Join(dir, "sandboxes", "old", "rootfs")
	if err := os.MkdirAll(legacy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", legacy, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if ids, _ := m.Mounted(context.Background()); len(ids) != 1 || ids[0] != "old" {
		t.Fatalf("Mounted = %v, want the legacy mount found", ids)
	}
	if err := m.Unmount(context.Background(), "old"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.mountAt(legacy); ok {
		unix.Unmount(legacy, unix.MNT_DETACH)
		t.Fatal("legacy mount point left mounted")
	}
}

package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/rootfs"
)

// TestSnapshotForkAndIncrementalChain runs the whole decision-6 flow on
// the real rootfs manager (btrfs uppers, overlay): snapshot a sandbox via
// a read-only btrfs snapshot, restore it into two forks sharing one cached
// lower, change one fork, snapshot it again (incremental: only its own
// changes), and restore the two-layer chain.
func TestSnapshotForkAndIncrementalChain(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("mkfs.btrfs not installed")
	}
	ctx := context.Background()
	data := t.TempDir()
	m, err := rootfs.Open(ctx, data, rootfs.Options{UpperSize: 1 << 30})
	must(t, err)
	t.Cleanup(func() {
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		m.Close()
	})
	cache, err := NewCache(filepath.Join(data, "snapshots", "layers"))
	must(t, err)
	t.Cleanup(func() { cache.Close() }) // runs before rootfs's Shutdown above
	base := imageLayer(t)
	store := memBlobs{}

	snap := func(id string) (string, string) {
		t.Helper()
		dir, release, err := m.SnapshotUpper(ctx, id)
		must(t, err)
		defer func() { must(t, release()) }()
		var buf bytes.Buffer
		st, err := Capture(ctx, dir, &buf, CaptureOptions{})
		must(t, err)
		sid := NewID()
		store[sid] = buf.Bytes()
		return sid, st.SHA256
	}

	a, err := m.Mount(ctx, "a", []string{base}, 64<<20, rootfs.IDMap{})
	must(t, err)
	mustWrite(t, filepath.Join(a, "home/me/project/main.go"), "package main", 0o644)
	must(t, os.Remove(filepath.Join(a, "etc/hosts")))
	must(t, os.RemoveAll(filepath.Join(a, "app/node_modules")))
	mustWrite(t, filepath.Join(a, "app/node_modules/only/index.js"), "only", 0o644)
	wantA := describe(t, a, true)

	s1, sum1 := snap("a")
	l1, err := cache.Layer(ctx, s1, sum1, store.opener(s1, nil))
	must(t, err)

	// Fork: two sandboxes on the same cached lower.
	for _, id := range []string{"f1", "f2"} {
		r, err := m.Mount(ctx, id, []string{base, l1}, 64<<20, rootfs.IDMap{})
		must(t, err)
		diffTrees(t, wantA, describe(t, r, true))
	}
	f1 := m.RootfsPath("f1")
	mustWrite(t, filepath.Join(f1, "home/me/project/main.go"), "package main // v2", 0o644)
	must(t, os.Remove(filepath.Join(f1, "etc/passwd")))
	wantF1 := describe(t, f1, true)
	// f2 is unaffected by f1's writes.
	diffTrees(t, wantA, describe(t, m.RootfsPath("f2"), true))

	s2, sum2 := snap("f1")
	// Incremental: the second layer holds f1's changes only.
	ents := tarEntries(t, decompress(t, store[s2]))
	if _, ok := ents["home/me/project/main.go"]; !ok {
		t.Fatal("incremental layer misses the changed file")
	}
	if _, ok := ents["app/node_modules/only/index.js"]; ok {
		t.Fatal("incremental layer repeats content of its parent layer")
	}
	l2, err := cache.Layer(ctx, s2, sum2, store.opener(s2, nil))
	must(t, err)
	r, err := m.Mount(ctx, "g", []string{base, l1, l2}, 64<<20, rootfs.IDMap{})
	must(t, err)
	diffTrees(t, wantF1, describe(t, r, true))
}

// TestForksShareOneMountedImage: item 5 of issue 15. Three sandboxes with
// their own user namespace ranges (idmapped views, as the daemon mounts
// them) are forked from one snapshot layer: the host holds one image, one
// EROFS mount of it, and every fork sees the same files under its own
// mapped ids; a write in one fork lands in its own upper only.
func TestForksShareOneMountedImage(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("mkfs.btrfs not installed")
	}
	ctx := context.Background()
	data := t.TempDir()
	m, err := rootfs.Open(ctx, data, rootfs.Options{UpperSize: 1 << 30})
	must(t, err)
	t.Cleanup(func() {
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		m.Close()
	})
	cache, err := NewCache(filepath.Join(data, "uppers", ".layers@cache")) // where the daemon keeps it
	must(t, err)
	t.Cleanup(func() { cache.Close() })
	base := imageLayer(t)
	blob, _ := capture(t, []string{workspaceUpper(t)}, CaptureOptions{})
	layer, err := cache.Layer(ctx, "snap_fork", shaHex(blob), memBlobs{"k": blob}.opener("k", nil))
	must(t, err)
	if !mounted(layer) {
		t.Skip("this kernel cannot mount layer images")
	}
	want := describe(t, mountOverlay(t, []string{base, unpackTo(t, blob)}, ""), true)

	for i, id := range []string{"f1", "f2", "f3"} {
		host := uint32(400000 + i*65536)
		r, err := m.Mount(ctx, id, []string{base, layer}, 64<<20, rootfs.IDMap{HostID: host, Size: 65536})
		must(t, err)
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(r, "ws/main.js"), &st))
		if st.Uid != host+1000 {
			t.Fatalf("fork %s sees the layer's uid 1000 as %d, want %d", id, st.Uid, host+1000)
		}
		got := describe(t, r, true)
		for p, d := range want { // the same files, ids shifted by the map
			g := got[p]
			for _, id := range []uint32{1000, 0} {
				g = strings.ReplaceAll(g, fmt.Sprintf("uid=%d gid=%d", host+id, host+id), fmt.Sprintf("uid=%d gid=%d", id, id))
				g = strings.ReplaceAll(g, fmt.Sprintf("uid=%d", host+id), fmt.Sprintf("uid=%d", id))
			}
			if g != d {
				t.Fatalf("fork %s, %s:\n  want %s\n  got  %s", id, p, d, got[p])
			}
		}
	}
	mustWrite(t, filepath.Join(m.RootfsPath("f1"), "ws/empty"), "mine", 0o644)
	if b, _ := os.ReadFile(filepath.Join(m.RootfsPath("f2"), "ws/empty")); len(b) != 0 {
		t.Fatalf("f1's write shows in f2: %q", b)
	}
	ms, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	// The layer's mount and each fork's idmapped view of it: all one
	// filesystem instance (one device number), so one page cache.
	devs := map[string]int{}
	for _, line := range strings.Split(string(ms), "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(line, " - erofs "+layer+imageSuffix+" ") {
			devs[f[2]]++
		}
	}
	if len(devs) != 1 {
		t.Fatalf("EROFS mounts of the layer image by device: %v, want one filesystem shared by all forks", devs)
	}
	for _, n := range devs {
		if n != 4 {
			t.Fatalf("%d mounts of the layer's filesystem, want 4 (the cache's and one view per fork)", n)
		}
	}
}

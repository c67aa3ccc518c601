package snapshot

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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

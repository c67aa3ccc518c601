package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestSnapshotUpperIsFrozenCopy(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	root, err := m.Mount(ctx, "snapme", twoLayers(t), 64<<20, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "work/file"), "v1")
	writeFile(t, filepath.Join(root, "keep"), "keep")

	dir, release, err := m.SnapshotUpper(ctx, "snapme")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(dir, "/upper") || !strings.Contains(dir, upperSnapPrefix) {
		t.Fatalf("snapshot dir %s", dir)
	}
	// Change everything after the snapshot: the snapshot must not see it.
	writeFile(t, filepath.Join(root, "work/file"), "v2-longer")
	writeFile(t, filepath.Join(root, "new"), "new")
	if err := os.Remove(filepath.Join(root, "keep")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "work/file")); got != "v1" {
		t.Fatalf("snapshot sees later write: %q", got)
	}
	if got := readFile(t, filepath.Join(dir, "keep")); got != "keep" {
		t.Fatalf("snapshot lost deleted file: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("snapshot sees a file created later: %v", err)
	}
	// The whiteout of lower file b made before the snapshot is in it.
	// (Deleting b happens here, after: it must not be.)
	if err := os.Remove(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("whiteout made after the snapshot is visible in it: %v", err)
	}
	// Read-only: nobody (not even root) can write into it.
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err == nil {
		t.Fatal("snapshot is writable")
	}

	// Not a sandbox: Known and Mounted ignore it.
	known, err := m.Known(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(known, []string{"snapme"}) {
		t.Fatalf("Known = %v, want only snapme", known)
	}
	mounted, _ := m.Mounted(ctx)
	if !slices.Equal(mounted, []string{"snapme"}) {
		t.Fatalf("Mounted = %v", mounted)
	}

	if err := release(); err != nil {
		t.Fatal(err)
	}
	if err := release(); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Dir(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("release left %s: %v", filepath.Dir(dir), err)
	}
	// The sandbox itself is untouched by the release.
	if got := readFile(t, filepath.Join(root, "work/file")); got != "v2-longer" {
		t.Fatalf("sandbox file after release: %q", got)
	}
}

func TestSnapshotUpperErrorsAndPrune(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	if _, _, err := m.SnapshotUpper(ctx, "missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, _, err := m.SnapshotUpper(ctx, "../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := m.Mount(ctx, "p", twoLayers(t), 0, IDMap{}); err != nil {
		t.Fatal(err)
	}
	// Two leaked snapshots (a crash before release) are pruned.
	for i := 0; i < 2; i++ {
		if _, _, err := m.SnapshotUpper(ctx, "p"); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		ents, _ := os.ReadDir(m.uppers)
		n := 0
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), upperSnapPrefix) {
				n++
			}
		}
		return n
	}
	if n := count(); n != 2 {
		t.Fatalf("%d snapshots, want 2", n)
	}
	if err := m.PruneUpperSnapshots(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d snapshots left after prune", n)
	}
	// A snapshot name can never be passed where a sandbox id is expected.
	if err := validID(upperSnapPrefix + "p@00"); err == nil {
		t.Fatal("snapshot name passes sandbox id validation")
	}
}

// TestLayerFromUpperSnapshot: an upper snapshot becomes a read-only layer
// that survives its release once moved (as the snapshot cache moves it),
// after clean ran on its upper/ while it was writable; DestroyLayer then
// deletes it. Paths that are not upper snapshots are refused.
func TestLayerFromUpperSnapshot(t *testing.T) {
	m, _ := openTest(t)
	ctx := context.Background()
	root, err := m.Mount(ctx, "layerme", twoLayers(t), 64<<20, IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "ws/file"), "v1")
	writeFile(t, filepath.Join(root, "ws/drop"), "x")
	dir, release, err := m.SnapshotUpper(ctx, "layerme")
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(m.uppers, "cache-slot")
	if err := m.LayerFromUpperSnapshot(filepath.Join(m.uppers, "layerme", "upper"), func(string) error { return nil }, moved); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a live upper was accepted: %v", err)
	}
	if err := m.LayerFromUpperSnapshot(dir, func(string) error { return nil }, "/tmp/elsewhere"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a destination off the uppers filesystem was accepted: %v", err)
	}
	if err := m.LayerFromUpperSnapshot(dir, func(d string) error { return os.Remove(filepath.Join(d, "ws/drop")) }, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(moved, "upper/ws/drop")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("clean did not run: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(moved, "work")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("work dir kept: %v", err)
	}
	if err := os.WriteFile(filepath.Join(moved, "upper/x"), nil, 0o644); err == nil {
		t.Fatal("layer is writable")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(moved, "upper/ws/file")); got != "v1" {
		t.Fatalf("moved layer: %q", got)
	}
	if err := m.DestroyLayer("/tmp"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("destroy outside the uppers: %v", err)
	}
	if err := m.DestroyLayer(moved); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(moved); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DestroyLayer left %s: %v", moved, err)
	}
}

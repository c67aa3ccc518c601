package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// session mounts base+chain with a fresh upper, runs ops through the
// merged view, unmounts and returns the upper: one snapshot layer exactly
// as a sandbox would leave it.
func session(t *testing.T, lowers []string, ops func(m string)) string {
	t.Helper()
	upper := filepath.Join(t.TempDir(), "upper")
	must(t, os.Mkdir(upper, 0o755))
	m := mountOverlay(t, lowers, upper)
	ops(m)
	unmount(m)
	return upper
}

// TestSquashMatchesChain: three incremental snapshot layers with adds,
// modifies, deletes (of base files and of chain-only files), opaque dirs
// and type changes, squashed into one, must give the same merged view over
// the base image as mounting the whole chain.
func TestSquashMatchesChain(t *testing.T) {
	needRoot(t)
	base := imageLayer(t)

	l1 := session(t, []string{base}, func(m string) {
		mustWrite(t, filepath.Join(m, "etc/passwd"), "modified in l1", 0o644)
		must(t, os.Remove(filepath.Join(m, "etc/hosts"))) // whiteout of a base file
		mustWrite(t, filepath.Join(m, "chain-only"), "short-lived", 0o644)
		mustWrite(t, filepath.Join(m, "work/a.txt"), "a1", 0o644)
		mustWrite(t, filepath.Join(m, "work/b.txt"), "b1", 0o644)
		must(t, os.RemoveAll(filepath.Join(m, "hand"))) // base dir deleted
		mustWrite(t, filepath.Join(m, "usr/lib/new.so"), "new", 0o755)
	})
	// l2 is unpacked from a capture, like a restored chain layer.
	b1, _ := capture(t, []string{l1}, CaptureOptions{})
	l1 = unpackTo(t, b1)

	l2 := session(t, []string{base, l1}, func(m string) {
		must(t, os.Remove(filepath.Join(m, "chain-only"))) // whiteout of a chain file
		must(t, os.RemoveAll(filepath.Join(m, "app/node_modules")))
		mustWrite(t, filepath.Join(m, "app/node_modules/fresh/index.js"), "fresh", 0o644) // opaque
		mustWrite(t, filepath.Join(m, "work/a.txt"), "a2", 0o644)
		must(t, os.RemoveAll(filepath.Join(m, "d3")))
		must(t, os.Link(filepath.Join(m, "work/b.txt"), filepath.Join(m, "work/b-link.txt")))
	})
	b2, _ := capture(t, []string{l2}, CaptureOptions{})
	l2 = unpackTo(t, b2)

	l3 := session(t, []string{base, l1, l2}, func(m string) {
		must(t, os.Remove(filepath.Join(m, "etc/passwd"))) // delete what l1 modified
		must(t, os.Remove(filepath.Join(m, "f3")))
		must(t, os.Mkdir(filepath.Join(m, "f3"), 0o711)) // file -> dir
		mustWrite(t, filepath.Join(m, "f3/inside"), "in", 0o644)
		must(t, os.Remove(filepath.Join(m, "work/b.txt")))
		must(t, os.Symlink("a.txt", filepath.Join(m, "work/b.txt"))) // file -> symlink
		mustWrite(t, filepath.Join(m, "d3/again"), "d3 recreated", 0o644)
		must(t, os.Remove(filepath.Join(m, "usr/lib/a.so")))
	})
	// A dir over a lower whiteout *without* the opaque xattr (as an OCI
	// layer from elsewhere may have it): overlay still hides the base's
	// hand/h1 because l1 whited hand out. Squash must keep it hidden.
	mustWrite(t, filepath.Join(l3, "hand/h2"), "h2", 0o644)

	chain := []string{l1, l2, l3} // l3 stays an upper dir: the "top upper" case
	want := describe(t, mountOverlay(t, append([]string{base}, chain...), ""), true)
	for _, gone := range []string{"etc/hosts", "etc/passwd", "chain-only", "hand/h1", "app/node_modules/x", "d3/e"} {
		if _, ok := want[gone]; ok {
			t.Fatalf("test setup: %s should be deleted in the chain view", gone)
		}
	}

	blob, _ := capture(t, chain, CaptureOptions{})
	sq := unpackTo(t, blob)
	got := describe(t, mountOverlay(t, []string{base, sq}, ""), true)
	diffTrees(t, want, got)

	// Negative control: squashing only the top two layers loses l1's
	// whiteout of etc/hosts; the comparison must notice.
	partial, _ := capture(t, chain[1:], CaptureOptions{})
	bad := describe(t, mountOverlay(t, []string{base, unpackTo(t, partial)}, ""), true)
	if _, ok := bad["etc/hosts"]; !ok {
		t.Fatal("negative control: a squash missing l1 should show etc/hosts again")
	}

	// A squashed layer is itself a valid chain element: squashing it with
	// nothing on top changes nothing.
	again, _ := capture(t, []string{sq}, CaptureOptions{})
	if !bytes.Equal(again, blob) {
		a, b := tarEntries(t, decompress(t, blob)), tarEntries(t, decompress(t, again))
		for n, h := range a {
			if g, ok := b[n]; !ok || fmt.Sprintf("%+v", *g) != fmt.Sprintf("%+v", *h) {
				t.Logf("DIFF %s:\n  first  %+v\n  again %+v", n, *h, b[n])
			}
		}
		t.Error("re-capturing a squashed layer gives different bytes")
	}
}

func TestSquashNeedsLayers(t *testing.T) {
	var sink bytes.Buffer
	if _, err := Squash(context.Background(), nil, &sink, CaptureOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("no layers: %v", err)
	}
	if _, err := Squash(context.Background(), []string{"/nonexistent-layer"}, &sink, CaptureOptions{}); err == nil {
		t.Fatal("missing layer accepted")
	}
}

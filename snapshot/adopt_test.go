package snapshot

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// xattrList lists every entry under root that has extended attributes.
func xattrList(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	buf := make([]byte, 4096)
	must(t, filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		names, err := listXattrs(p, &buf)
		if err != nil {
			return err
		}
		if len(names) > 0 && p != root {
			sort.Strings(names)
			rel, _ := filepath.Rel(root, p)
			out[rel] = strings.Join(names, ",")
		}
		return nil
	}))
	return out
}

// TestAdoptedLayerEqualsBuiltLayer: a captured upper, cleaned and adopted
// (the capturing host's layer), shows the same files as the layer built
// from its blob (a mounted EROFS image where the kernel can, else an
// unpack), is served without reading the blob, and is deleted with the
// hook on Remove. Negative control: before CleanLayer the tree differs
// (an xattr the layer format does not carry, a socket Capture skips).
func TestAdoptedLayerEqualsBuiltLayer(t *testing.T) {
	needRoot(t)
	u := workspaceUpper(t)
	must(t, unix.Lsetxattr(filepath.Join(u, "ws/empty"), "user.note", []byte("x"), 0))
	must(t, unix.Lsetxattr(filepath.Join(u, "ws"), "trusted.overlay.origin", []byte("x"), 0))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(u, "ws/sock"), Net: "unix"})
	must(t, err)
	l.SetUnlinkOnClose(false)
	l.Close()
	var wsBefore unix.Stat_t
	must(t, unix.Lstat(filepath.Join(u, "ws"), &wsBefore))
	blob, _ := capture(t, []string{u}, CaptureOptions{})
	sum := shaHex(blob)
	ctx := context.Background()

	built, _ := newCache(t, Limits{})
	bp, err := built.Layer(ctx, "snap_b", sum, memBlobs{"k": blob}.opener("k", nil))
	must(t, err)
	want, wantX := describe(t, bp, true), xattrList(t, bp)

	// Negative control: the raw upper is not the layer.
	if _, ok := describe(t, u, true)["ws/sock"]; !ok {
		t.Fatal("control: no socket in the raw upper")
	}
	if x := xattrList(t, u); x["ws/empty"] == "" || x["ws"] == "" {
		t.Fatalf("control: raw upper xattrs %v", x)
	}

	must(t, CleanLayer(u))
	c, dir := newCache(t, Limits{})
	var destroyed []string
	c.SetDestroyer(func(p string) error { destroyed = append(destroyed, p); return os.RemoveAll(p) })
	root := filepath.Dir(u)
	must(t, c.Adopt("snap_a", sum, "upper", func(dst string) error { return os.Rename(root, dst) }))
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Fatalf("the adopted tree is still at %s: %v", root, err)
	}
	var calls int64
	p, err := c.Layer(ctx, "snap_a", sum, memBlobs{}.opener("k", &calls))
	must(t, err)
	if calls != 0 || filepath.Base(p) != "upper" {
		t.Fatalf("adopted layer %s: %d blob reads", p, calls)
	}
	diffTrees(t, want, describe(t, p, true))
	if got := xattrList(t, p); len(got) != len(wantX) || got["app/node_modules"] != wantX["app/node_modules"] {
		t.Fatalf("xattrs: adopted %v, built %v", got, wantX)
	}
	var wsAfter unix.Stat_t
	must(t, unix.Lstat(filepath.Join(p, "ws"), &wsAfter))
	if wsAfter.Mtim != wsBefore.Mtim {
		t.Fatal("CleanLayer changed a directory's mtime")
	}
	// A second adoption of the same content keeps the first.
	if err := c.Adopt("snap_a2", sum, "upper", func(string) error { t.Fatal("placed twice"); return nil }); err != ErrCached {
		t.Fatalf("second adopt: %v", err)
	}
	must(t, c.Remove("snap_a"))
	if len(destroyed) != 0 {
		t.Fatalf("layer destroyed while snap_a2 still uses it: %v", destroyed)
	}
	must(t, c.Remove("snap_a2"))
	if len(destroyed) != 1 || len(dirEntries(t, dir)) != 1 {
		t.Fatalf("after Remove: destroyed %v, cache dir %v", destroyed, dirEntries(t, dir))
	}
	// A placement that fails leaves nothing in the cache.
	if err := c.Adopt("snap_f", sum, "upper", func(string) error { return os.ErrPermission }); err == nil {
		t.Fatal("a failed placement was reported as adopted")
	}
	if len(dirEntries(t, dir)) != 1 {
		t.Fatalf("a failed adopt left %v", dirEntries(t, dir))
	}
	// A tree a crash left without its completeness marker goes when the
	// next daemon sets the destroyer; a complete one stays.
	must(t, os.Mkdir(filepath.Join(dir, "0123456789ab"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "0123456789ab"+subvolSuffix), []byte("upper\n"), 0o600))
	must(t, c.Adopt("snap_k", sum, "upper", func(dst string) error { return os.Mkdir(dst, 0o755) }))
	destroyed = nil
	c.SetDestroyer(func(p string) error { destroyed = append(destroyed, p); return os.RemoveAll(p) })
	if len(destroyed) != 1 || filepath.Base(destroyed[0]) != "0123456789ab" {
		t.Fatalf("crash leftovers: destroyed %v", destroyed)
	}
	must(t, c.Remove("snap_k"))
	// Without a destroyer, adopting is refused.
	c2, _ := newCache(t, Limits{})
	if err := c2.Adopt("snap_c", sum, "upper", func(string) error { return nil }); err == nil {
		t.Fatal("adopt without a destroyer succeeded")
	}
}

package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// workspaceUpper is an upper dir with what sandboxes leave behind: nested
// dirs, small and large files, hardlinks, symlinks, a FIFO, setuid, other
// owners, whiteouts and an opaque dir.
func workspaceUpper(t *testing.T) string {
	u := filepath.Join(t.TempDir(), "upper")
	for i := 0; i < 300; i++ {
		mustWrite(t, filepath.Join(u, fmt.Sprintf("ws/node_modules/pkg%d/lib/m%d.js", i/50, i)), strings.Repeat(fmt.Sprintf("const v%d = %d;\n", i, i), 1+i*7), 0o644)
	}
	mustWrite(t, filepath.Join(u, "ws/big.bin"), strings.Repeat("0123456789abcdef", 40000), 0o600)
	mustWrite(t, filepath.Join(u, "ws/empty"), "", 0o644)
	must(t, os.Link(filepath.Join(u, "ws/big.bin"), filepath.Join(u, "ws/big-link.bin")))
	must(t, os.Symlink("node_modules/pkg0/lib/m0.js", filepath.Join(u, "ws/main.js")))
	must(t, os.Symlink("/"+strings.Repeat("deep/", 500), filepath.Join(u, "ws/long")))
	must(t, unix.Mkfifo(filepath.Join(u, "ws/fifo"), 0o640))
	mustWrite(t, filepath.Join(u, "usr/bin/tool"), "#!/bin/sh\n", 0o4755)
	must(t, os.Lchown(filepath.Join(u, "ws"), 1000, 1000))
	must(t, os.Lchown(filepath.Join(u, "ws/main.js"), 1000, 1000))
	must(t, os.MkdirAll(filepath.Join(u, "etc"), 0o755))
	whiteout(t, filepath.Join(u, "etc/hosts"))
	mustWrite(t, filepath.Join(u, "app/node_modules/z/index.js"), "z", 0o644)
	setOpaque(t, filepath.Join(u, "app/node_modules"))
	return u
}

// TestCacheMountsImageWithSameFiles: a layer is served as a mounted EROFS
// image, and what it shows is exactly what unpacking the same blob (the
// restore path before images) gives: same entries, types, modes, owners,
// content sha256, link targets, hardlinks, whiteouts, opaque dirs, mtimes.
// The two-layer fork of TestSnapshotForkAndIncrementalChain then runs over
// mounted images too.
func TestCacheMountsImageWithSameFiles(t *testing.T) {
	needRoot(t)
	blob, _ := capture(t, []string{workspaceUpper(t)}, CaptureOptions{})
	c, dir := newCache(t, Limits{})
	p, err := c.Layer(context.Background(), "snap_img", shaHex(blob), memBlobs{"k": blob}.opener("k", nil))
	must(t, err)
	if !mounted(p) {
		t.Skip("this kernel cannot mount layer images; the cache unpacked instead")
	}
	for _, f := range []string{".erofs", ".erofs.sha256", ".sha256"} {
		if _, err := os.Stat(p + f); err != nil {
			t.Fatalf("cache files: %v", err)
		}
	}
	got := describe(t, p, true)
	want := describe(t, unpackTo(t, blob), true)
	diffTrees(t, want, got)
	if len(got) < 300 || !strings.HasPrefix(got["etc/hosts"], "chr 0") || !strings.Contains(got["app/node_modules"], "opaque=y") {
		t.Fatalf("tree misses entries or overlay markers: %d entries, %q, %q", len(got), got["etc/hosts"], got["app/node_modules"])
	}
	// It is read-only on the host too.
	if err := os.WriteFile(filepath.Join(p, "ws/empty"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write into a mounted layer: %v", err)
	}
	// Capturing again from the mounted lower (what Squash reads) gives the
	// same blob: the image holds the tree, whiteouts and opaque dirs too.
	again, _ := capture(t, []string{p}, CaptureOptions{})
	if shaHex(again) != shaHex(blob) {
		t.Fatal("a capture of the mounted image differs from the original capture")
	}
	must(t, c.Remove("snap_img"))
	if mounted(p) || len(dirEntries(t, dir)) != 1 {
		t.Fatalf("after Remove: mounted %v, cache dir %v", mounted(p), dirEntries(t, dir))
	}
}

// TestCacheRefusesTamperedImage: an image at rest that no longer matches
// the digest recorded when it was built is never mounted; the cache drops
// it and rebuilds the layer from the (verified) blob. Negative control:
// the tampered image is a valid filesystem the kernel would mount and
// serve, so the refusal is the digest check.
func TestCacheRefusesTamperedImage(t *testing.T) {
	needRoot(t)
	blob := smallLayer(t, "original content")
	sum := shaHex(blob)
	c, _ := newCache(t, Limits{})
	var calls int64
	ctx := context.Background()
	p, err := c.Layer(ctx, "snap_t", sum, memBlobs{"k": blob}.opener("k", &calls))
	must(t, err)
	if !mounted(p) {
		t.Skip("this kernel cannot mount layer images")
	}
	// As after a reboot: unmounted, then the image changed at rest.
	must(t, c.Close())
	img, err := os.ReadFile(p + imageSuffix)
	must(t, err)
	i := strings.Index(string(img), "original content")
	if i < 0 {
		t.Fatal("file content not found in the image")
	}
	tampered := []byte(string(img[:i]) + "hacked!! content" + string(img[i+16:]))
	must(t, os.WriteFile(p+imageSuffix, tampered, 0o600))

	slot := filepath.Base(p)
	if err := c.verifyAndMount(slot); !errors.Is(err, errdefs.ErrInvalidArgument) || mounted(p) {
		t.Fatalf("tampered image: %v, mounted %v", err, mounted(p))
	}
	// Layer drops it and rebuilds from the blob.
	p2, err := c.Layer(ctx, "snap_t", sum, memBlobs{"k": blob}.opener("k", &calls))
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(p2, "dir/file")); p2 != p || string(b) != "original content" || calls != 2 {
		t.Fatalf("after rebuild: %s %q, %d blob reads", p2, b, calls)
	}

	// Negative control: mounted without the check, the kernel serves the
	// tampered bytes.
	ctl := filepath.Join(t.TempDir(), "ctl.erofs")
	must(t, os.WriteFile(ctl, tampered, 0o600))
	target := t.TempDir()
	must(t, mountImage(ctl, target))
	defer unmountLayer(target)
	if b, _ := os.ReadFile(filepath.Join(target, "dir/file")); string(b) != "hacked!! content" {
		t.Fatalf("control: the tampered image shows %q", b)
	}
}

// TestCacheFallsBackToUnpack: where images cannot be mounted, layers are
// unpacked directories as before, with the same files.
func TestCacheFallsBackToUnpack(t *testing.T) {
	needRoot(t)
	blob, _ := capture(t, []string{workspaceUpper(t)}, CaptureOptions{})
	c, _ := newCache(t, Limits{})
	c.unpack.Store(true)
	p, err := c.Layer(context.Background(), "snap_dir", shaHex(blob), memBlobs{"k": blob}.opener("k", nil))
	must(t, err)
	if mounted(p) {
		t.Fatal("mounted although unpacking was forced")
	}
	if _, err := os.Stat(p + imageSuffix); !os.IsNotExist(err) {
		t.Fatalf("an image was left for an unpacked layer: %v", err)
	}
	diffTrees(t, describe(t, unpackTo(t, blob), true), describe(t, p, true))
	// A cache that can mount still serves the unpacked layer as it is.
	c.unpack.Store(false)
	p2, err := c.Layer(context.Background(), "snap_dir", shaHex(blob), memBlobs{}.opener("k", nil))
	if err != nil || p2 != p || mounted(p2) {
		t.Fatalf("reuse of an unpacked layer: %s %v", p2, err)
	}
}

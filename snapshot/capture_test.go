package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// buildUpper makes an overlay upper dir with one of everything a sandbox
// can leave behind.
func buildUpper(t *testing.T) string {
	u := t.TempDir()
	mustWrite(t, filepath.Join(u, "dir/file.txt"), "hello", 0o640)
	must(t, os.Chown(filepath.Join(u, "dir/file.txt"), 1000, 1001))
	must(t, os.Chown(filepath.Join(u, "dir"), 1000, 1000))
	must(t, os.Chmod(filepath.Join(u, "dir"), 0o750))
	must(t, os.Link(filepath.Join(u, "dir/file.txt"), filepath.Join(u, "hardlink")))
	mustWrite(t, filepath.Join(u, "with space & ünïcode ✓.txt"), "unicode", 0o644)
	mustWrite(t, filepath.Join(u, "bad\xffname"), "not utf-8", 0o600)
	mustWrite(t, filepath.Join(u, "bin/suid"), "#!/bin/true", 0o755)
	must(t, os.Chmod(filepath.Join(u, "bin/suid"), 0o4755|os.ModeSetuid))
	must(t, unix.Chmod(filepath.Join(u, "bin/suid"), 0o4755))
	must(t, unix.Chmod(filepath.Join(u, "bin"), 0o1777)) // sticky, like /tmp
	long := strings.Repeat("deep-directory-name/", 8) + strings.Repeat("x", 120)
	mustWrite(t, filepath.Join(u, long), "long path", 0o644)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	must(t, os.WriteFile(filepath.Join(u, "big.bin"), big, 0o644))
	mustWrite(t, filepath.Join(u, "empty"), "", 0o644)
	must(t, os.Mkdir(filepath.Join(u, "emptydir"), 0o700))
	must(t, os.Symlink("/", filepath.Join(u, "to-root")))
	must(t, os.Symlink("../..", filepath.Join(u, "dir/up-up")))
	must(t, os.Symlink("dir/file.txt", filepath.Join(u, "rel-link")))
	must(t, os.Symlink("/nonexistent/dangling", filepath.Join(u, "dangling")))
	must(t, unix.Lchown(filepath.Join(u, "rel-link"), 1000, 1000))
	whiteout(t, filepath.Join(u, "gone"))
	whiteout(t, filepath.Join(u, "dir/gone-too"))
	mustWrite(t, filepath.Join(u, "opq/new"), "in opaque", 0o644)
	setOpaque(t, filepath.Join(u, "opq"))
	must(t, unix.Mkfifo(filepath.Join(u, "fifo"), 0o620))
	// Sub-second mtimes must survive (make-style tools compare them).
	ts := time.Unix(1_700_000_000, 123456789)
	must(t, os.Chtimes(filepath.Join(u, "empty"), ts, ts))
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(u, "to-root"),
		[]unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.UnixNano())}, unix.AT_SYMLINK_NOFOLLOW))
	must(t, os.Chtimes(filepath.Join(u, "emptydir"), ts, ts))
	return u
}

func TestCaptureRoundTrip(t *testing.T) {
	needRoot(t)
	u := buildUpper(t)
	// A unix socket and a real device node: neither can go in a layer.
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	must(t, unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(u, "sock")}))
	unix.Close(sock)
	must(t, unix.Mknod(filepath.Join(u, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))

	want := describe(t, u, true)
	delete(want, "sock")
	delete(want, "null")

	blob, st := capture(t, []string{u}, CaptureOptions{})
	if st.Skipped != 2 {
		t.Errorf("skipped %d entries, want 2 (socket, device)", st.Skipped)
	}
	raw := decompress(t, blob)
	if st.UncompressedBytes != int64(len(raw)) {
		t.Errorf("UncompressedBytes %d, tar is %d", st.UncompressedBytes, len(raw))
	}
	ents := tarEntries(t, raw)
	if st.Files != int64(len(ents)) {
		t.Errorf("Files %d, tar has %d entries", st.Files, len(ents))
	}
	// OCI form on the wire.
	for name, typ := range map[string]byte{
		".wh.gone": tar.TypeReg, "dir/.wh.gone-too": tar.TypeReg, "opq/.wh..wh..opq": tar.TypeReg,
		"opq/": tar.TypeDir, "to-root": tar.TypeSymlink, "fifo": tar.TypeFifo,
	} {
		h, ok := ents[name]
		if !ok || h.Typeflag != typ {
			t.Errorf("tar entry %q missing or wrong type (%v)", name, h)
		}
	}
	if h := ents["hardlink"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "dir/file.txt" {
		if h2 := ents["dir/file.txt"]; h2 == nil || h2.Typeflag != tar.TypeLink || h2.Linkname != "hardlink" {
			t.Errorf("hardlink not written as a tar link: %+v %+v", h, h2)
		}
	}
	for name := range ents {
		if strings.HasPrefix(name, "/") || strings.HasPrefix(name, "./") || name == "gone" || strings.Contains(name, "sock") || name == "null" {
			t.Errorf("unexpected tar entry %q", name)
		}
	}
	if h := ents["bin/suid"]; h == nil || h.Mode&0o4000 == 0 {
		t.Errorf("setuid bit lost: %+v", h)
	}

	got := describe(t, unpackTo(t, blob), true)
	diffTrees(t, want, got)

	// Deterministic: the same tree gives the same bytes (identical
	// snapshots share one cache entry).
	blob2, _ := capture(t, []string{u}, CaptureOptions{})
	if !bytes.Equal(blob, blob2) {
		t.Error("two captures of the same tree differ")
	}
}

// TestCaptureNeverFollowsSymlinks: a sandbox plants symlinks to a host
// directory in its upper. Capture must record the links and read nothing
// behind them.
func TestCaptureNeverFollowsSymlinks(t *testing.T) {
	base := t.TempDir()
	canary := filepath.Join(base, "host-canary")
	mustWrite(t, filepath.Join(canary, "secret"), "HOST-SECRET-CONTENT", 0o600)
	u := filepath.Join(base, "sandbox", "upper")
	mustWrite(t, filepath.Join(u, "ok"), "ok", 0o644)
	must(t, os.Symlink(canary, filepath.Join(u, "abs-escape")))
	must(t, os.Symlink("../../host-canary", filepath.Join(u, "rel-escape")))
	must(t, os.Symlink(filepath.Join(canary, "secret"), filepath.Join(u, "file-escape")))
	must(t, os.Symlink("/", filepath.Join(u, "root")))

	blob, _ := capture(t, []string{u}, CaptureOptions{})
	raw := decompress(t, blob)
	ents := tarEntries(t, raw)
	if bytes.Contains(raw, []byte("HOST-SECRET-CONTENT")) {
		t.Fatal("capture read a host file through a symlink")
	}
	for name, h := range ents {
		if name != "ok" && h.Typeflag != tar.TypeSymlink {
			t.Errorf("entry %q (type %c): only the symlinks themselves may be captured", name, h.Typeflag)
		}
		if strings.Contains(name, "secret") {
			t.Errorf("entry %q came from behind a symlink", name)
		}
	}
	if len(ents) != 5 {
		t.Errorf("got %d entries, want 5", len(ents))
	}

	// Negative control: a naive walker that stats with os.Stat (follows
	// links) and descends into what it finds leaks the canary, so the
	// probe above can catch a following implementation.
	var leaked bool
	var naive func(dir string, depth int)
	naive = func(dir string, depth int) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := os.Stat(p)
			if err != nil || depth > 3 || e.Name() == "root" { // do not walk the whole host
				continue
			}
			if !fi.IsDir() && !fi.Mode().IsRegular() {
				continue
			}
			if fi.IsDir() {
				naive(p, depth+1)
			} else if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("HOST-SECRET-CONTENT")) {
				leaked = true
			}
		}
	}
	naive(u, 0)
	if !leaked {
		t.Fatal("negative control: the naive walker should have read the canary")
	}
}

func TestCaptureBounds(t *testing.T) {
	u := t.TempDir()
	deep := u
	for i := 0; i < 10; i++ {
		deep = filepath.Join(deep, "d")
	}
	must(t, os.MkdirAll(deep, 0o755))
	for i := 0; i < 20; i++ {
		mustWrite(t, filepath.Join(u, "f", string(rune('a'+i))), "x", 0o644)
	}
	ctx := context.Background()
	var sink bytes.Buffer
	if _, err := Capture(ctx, u, &sink, CaptureOptions{MaxDepth: 5}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("depth 10 with MaxDepth 5: %v", err)
	}
	if _, err := Capture(ctx, u, &sink, CaptureOptions{MaxEntries: 15}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("31 entries with MaxEntries 15: %v", err)
	}
	if _, err := Capture(ctx, u, &sink, CaptureOptions{Limits: Limits{MaxUncompressedBytes: 8 << 10}}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("uncompressed cap: %v", err)
	}
	if _, err := Capture(ctx, u, &sink, CaptureOptions{}); err != nil { // control: defaults pass
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Capture(cctx, u, &sink, CaptureOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v", err)
	}

	// A user file named like a whiteout would turn into a deletion on
	// restore: refused, not silently rewritten.
	mustWrite(t, filepath.Join(u, ".wh.passwd"), "", 0o644)
	if _, err := Capture(ctx, u, &sink, CaptureOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf(".wh. file: %v", err)
	}
	must(t, os.Remove(filepath.Join(u, ".wh.passwd")))

	// A sparse 4 GiB file is 4 GiB of zeros in a tar: restore's ratio
	// guard would refuse it, so capture refuses it first.
	f, err := os.Create(filepath.Join(u, "sparse"))
	must(t, err)
	must(t, f.Truncate(4<<30))
	f.Close()
	_, err = Capture(ctx, u, &sink, CaptureOptions{Limits: Limits{MaxUncompressedBytes: 64 << 20}})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("sparse 4 GiB file past a 64 MiB cap: %v", err)
	}
}

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

func unpackEnts(t *testing.T, dst string, opts UnpackOptions, ents ...ent) error {
	t.Helper()
	return Unpack(context.Background(), bytes.NewReader(mkTar(t, ents...)), dst, opts)
}

func isWhiteout(t *testing.T, p string) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func TestUnpackWhiteoutConversion(t *testing.T) {
	needRoot(t)
	dst := t.TempDir()
	err := unpackEnts(t, dst, UnpackOptions{},
		dir("d/"), file("d/.wh..wh..opq", ""), file("d/keep", "k"),
		file(".wh.gone", ""),
		file("sub/.wh.deep", ""),                    // parent made on demand
		file("same", "stays"), file(".wh.same", ""), // same-layer entry wins
		ent{name: "pre", typ: tar.TypeChar}, // already overlay form (0:0)
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"gone", "sub/deep", "pre"} {
		if !isWhiteout(t, filepath.Join(dst, p)) {
			t.Errorf("%s is not a 0:0 whiteout", p)
		}
	}
	for _, p := range []string{".wh.gone", "sub/.wh.deep", "d/.wh..wh..opq", ".wh.same"} {
		if _, err := os.Lstat(filepath.Join(dst, p)); err == nil {
			t.Errorf("%s left in the layer", p)
		}
	}
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(filepath.Join(dst, "d"), opaqueXattr, buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Errorf("opaque xattr = %q, %v", buf[:n], err)
	}
	wantContent(t, filepath.Join(dst, "d/keep"), "k")
	wantContent(t, filepath.Join(dst, "same"), "stays")

	// A later entry replaces a whiteout.
	if err := unpackEnts(t, dst, UnpackOptions{}, file("gone", "back")); err != nil {
		t.Fatal(err)
	}
	wantContent(t, filepath.Join(dst, "gone"), "back")
}

// TestUnpackOverlaySemantics mounts two unpacked layers with overlayfs and
// checks the whiteouts hide what the image spec says they hide.
func TestUnpackOverlaySemantics(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	l1, l2, up, work, mnt := filepath.Join(base, "1"), filepath.Join(base, "2"), filepath.Join(base, "u"), filepath.Join(base, "w"), filepath.Join(base, "m")
	for _, d := range []string{l1, l2, up, work, mnt} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, unpackEnts(t, l1, UnpackOptions{}, file("foo", "1"), dir("bar/"), file("bar/x", "1"), file("keep", "1")))
	must(t, unpackEnts(t, l2, UnpackOptions{}, file(".wh.foo", ""), dir("bar/"), file("bar/.wh..wh..opq", ""), file("bar/y", "2")))
	opts := "lowerdir=" + l2 + ":" + l1 + ",upperdir=" + up + ",workdir=" + work
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		t.Skipf("overlayfs not mountable here: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if _, err := os.Lstat(filepath.Join(mnt, "foo")); !os.IsNotExist(err) {
		t.Errorf("foo visible through the whiteout: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "bar/x")); !os.IsNotExist(err) {
		t.Errorf("bar/x visible through the opaque dir: %v", err)
	}
	wantContent(t, filepath.Join(mnt, "bar/y"), "2")
	wantContent(t, filepath.Join(mnt, "keep"), "1")
}

func TestUnpackMetadata(t *testing.T) {
	needRoot(t)
	dst := t.TempDir()
	setuid := file("bin/su", "#!")
	setuid.mode, setuid.uid, setuid.gid = 0o4755, 1234, 5678
	d := dir("bin/")
	d.mode, d.uid = 0o750, 42
	ln := symlink("bin/sh", "busybox")
	ln.uid, ln.gid = 7, 8
	withXattr := file("cap", "x")
	withXattr.pax = map[string]string{
		"SCHILY.xattr.security.capability":      "\x01\x00\x00\x02",
		"SCHILY.xattr.trusted.overlay.redirect": "/etc",
		"SCHILY.xattr.user.foo":                 "bar",
	}
	must(t, unpackEnts(t, dst, UnpackOptions{}, d, setuid, ln, hardlink("bin/su2", "bin/su"),
		ent{name: "fifo", typ: tar.TypeFifo, mode: 0o640}, withXattr))

	fi, err := os.Lstat(filepath.Join(dst, "bin/su"))
	must(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 || st.Uid != 1234 || st.Gid != 5678 || st.Nlink != 2 {
		t.Errorf("bin/su: mode %v uid %d gid %d nlink %d", fi.Mode(), st.Uid, st.Gid, st.Nlink)
	}
	if !fi.ModTime().Equal(testTime) {
		t.Errorf("mtime %v, want %v", fi.ModTime(), testTime)
	}
	fi, err = os.Lstat(filepath.Join(dst, "bin"))
	must(t, err)
	if fi.Mode().Perm() != 0o750 || fi.Sys().(*syscall.Stat_t).Uid != 42 || !fi.ModTime().Equal(testTime) {
		t.Errorf("bin dir: %v uid %d mtime %v", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, fi.ModTime())
	}
	fi, err = os.Lstat(filepath.Join(dst, "bin/sh"))
	must(t, err)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 7 || st.Gid != 8 {
		t.Errorf("symlink owner %d:%d", st.Uid, st.Gid)
	}
	fi, err = os.Lstat(filepath.Join(dst, "fifo"))
	must(t, err)
	if fi.Mode()&os.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o640 {
		t.Errorf("fifo mode %v", fi.Mode())
	}
	buf := make([]byte, 1024)
	if n, _ := unix.Llistxattr(filepath.Join(dst, "cap"), buf); n > 0 {
		t.Errorf("xattrs from the tar were applied: %q", strings.ReplaceAll(string(buf[:n]), "\x00", ","))
	}
}

func TestUnpackCaps(t *testing.T) {
	needRoot(t)
	cases := []struct {
		name string
		opts UnpackOptions
		ents []ent
	}{
		{"entries", UnpackOptions{MaxEntries: 3}, []ent{file("a", ""), file("b", ""), file("c", ""), file("d", "")}},
		{"file size", UnpackOptions{MaxFileSize: 4}, []ent{file("a", "12345")}},
		{"total", UnpackOptions{MaxTotalBytes: 8}, []ent{file("a", "12345"), file("b", "12345")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := unpackEnts(t, t.TempDir(), tc.opts, tc.ents...)
			if !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Errorf("err = %v, want resource exhausted", err)
			}
		})
	}
	// Under the caps the same streams unpack.
	must(t, unpackEnts(t, t.TempDir(), UnpackOptions{MaxEntries: 4, MaxTotalBytes: 10}, file("a", "12345"), file("b", "12345")))
}

func TestUnpackSkipDevicesAndSparse(t *testing.T) {
	needRoot(t)
	dst := t.TempDir()
	zeros := file("sparse", string(make([]byte, 4<<20)))
	must(t, unpackEnts(t, dst, UnpackOptions{SkipDevices: true},
		ent{name: "null", typ: tar.TypeChar, major: 1, minor: 3, mode: 0o666}, zeros))
	if _, err := os.Lstat(filepath.Join(dst, "null")); !os.IsNotExist(err) {
		t.Errorf("device entry not skipped: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dst, "sparse"))
	must(t, err)
	if fi.Size() != 4<<20 || fi.Sys().(*syscall.Stat_t).Blocks > 64 {
		t.Errorf("sparse: size %d blocks %d", fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks)
	}
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"a/b": "a/b", "/a/b": "a/b", "./a//b/": "a/b", "a/../b": "b", "/": ".", "": ".", "//x": "x",
	} {
		if got, err := CleanName(in); err != nil || got != want {
			t.Errorf("CleanName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "a/../../x", "a\x00b", "/../x"} {
		if _, err := CleanName(in); err == nil {
			t.Errorf("CleanName(%q) accepted", in)
		}
	}
}

// The parallel small-file writers keep the stream's order: a file replaced
// by a later entry of the same name, a file under a directory that a later
// entry turns into a file, and a later hardlink to a just-written file all
// end as a sequential unpack would leave them. Negative control (by hand):
// with writers.busy always false this test fails.
func TestUnpackParallelKeepsStreamOrder(t *testing.T) {
	needRoot(t) // the unpacked files keep their owners
	// Uneven worker delays make any reordering show.
	var n atomic.Int64
	slowWrites = func() {
		if n.Add(1)%2 == 1 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	defer func() { slowWrites = nil }()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	for i := 0; i < 200; i++ {
		add(&tar.Header{Name: fmt.Sprintf("d/f%d", i), Typeflag: tar.TypeReg}, fmt.Sprintf("first %d", i))
	}
	for i := 0; i < 200; i += 2 {
		add(&tar.Header{Name: fmt.Sprintf("d/f%d", i), Typeflag: tar.TypeReg}, fmt.Sprintf("second %d", i))
	}
	add(&tar.Header{Name: "x/inner", Typeflag: tar.TypeReg}, "inner")
	add(&tar.Header{Name: "x", Typeflag: tar.TypeReg}, "x is a file now")
	add(&tar.Header{Name: "link", Typeflag: tar.TypeLink, Linkname: "d/f1"}, "")
	tw.Close()
	dst := t.TempDir()
	if err := Unpack(context.Background(), &buf, dst, UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		want := fmt.Sprintf("first %d", i)
		if i%2 == 0 {
			want = fmt.Sprintf("second %d", i)
		}
		if b, _ := os.ReadFile(filepath.Join(dst, "d", fmt.Sprintf("f%d", i))); string(b) != want {
			t.Fatalf("d/f%d = %q, want %q", i, b, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "x")); string(b) != "x is a file now" {
		t.Fatalf("x = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "link")); string(b) != "first 1" {
		t.Fatalf("link = %q", b)
	}
}

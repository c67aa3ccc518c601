package erofs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

type ent struct {
	h    tar.Header
	data []byte
}

func mkTar(t testing.TB, ents []ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.Format == 0 {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if len(e.data) > 0 {
			if _, err := tw.Write(e.data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var t0 = time.Unix(1700000000, 123456789)

func file(name string, data []byte, mode int64) ent {
	return ent{h: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Uid: 1000, Gid: 1000, ModTime: t0}, data: data}
}

func dirEnt(name string, mode int64) ent {
	return ent{h: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: t0.Add(time.Hour)}}
}

// richLayer covers every entry kind and size class the writer lays out
// differently: inline and block files, block boundaries, holes, a
// directory spanning several blocks, hardlinks, short and long symlinks,
// FIFOs, whiteouts, opaque dirs, setuid bits and large ids.
func richLayer(t testing.TB) []byte {
	var ents []ent
	// Every parent has its own entry: image.Unpack stamps a parent it has
	// to make with the time of the unpack.
	for _, d := range []string{"home", "etc", "usr", "usr/bin", "data", "many"} {
		ents = append(ents, dirEnt(d, 0o755))
	}
	ents = append(ents, dirEnt("home/user", 0o750))
	for _, n := range []int{0, 1, 100, 2047, 2048, 2049, 4095, 4096, 4097, 65536, 1<<20 + 3} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + (i*7+n)%26)
		}
		ents = append(ents, file(fmt.Sprintf("home/user/f%d", n), b, 0o644))
	}
	sparse := make([]byte, 5*4096+10)
	copy(sparse, "head")
	copy(sparse[3*4096:], "middle")
	ents = append(ents, file("home/user/sparse", sparse, 0o600))
	zeros := make([]byte, 3*4096)
	ents = append(ents, file("home/user/zeros", zeros, 0o600))
	su := file("usr/bin/su", []byte("#!/bin/sh\n"), 0o4755)
	su.h.Uid, su.h.Gid = 0, 0
	big := file("data/bigid", []byte("x"), 0o644)
	big.h.Uid, big.h.Gid = 1<<31, 65534
	ents = append(ents, su, big)
	// A directory of 600 entries with long names: several dir blocks.
	for i := 0; i < 600; i++ {
		ents = append(ents, file(fmt.Sprintf("many/%s-%04d", strings.Repeat("n", 40), i), []byte{byte(i)}, 0o644))
	}
	ents = append(ents,
		ent{h: tar.Header{Name: "home/user/link", Typeflag: tar.TypeLink, Linkname: "home/user/f100", ModTime: t0}},
		ent{h: tar.Header{Name: "home/user/sym", Typeflag: tar.TypeSymlink, Linkname: "../../etc/passwd", ModTime: t0}},
		ent{h: tar.Header{Name: "home/user/longsym", Typeflag: tar.TypeSymlink, Linkname: strings.Repeat("abcd/", 810), ModTime: t0}},
		ent{h: tar.Header{Name: "home/user/fifo", Typeflag: tar.TypeFifo, Mode: 0o640, ModTime: t0}},
		ent{h: tar.Header{Name: "etc/.wh.hosts", Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}},
		dirEnt("opaque", 0o755),
		ent{h: tar.Header{Name: "opaque/.wh..wh..opq", Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}},
		file("opaque/kept", []byte("kept"), 0o644),
		// A later entry replaces an earlier one of the same name.
		file("home/user/f1", []byte("replaced"), 0o644),
		// A whiteout of a name present in this layer keeps the entry.
		ent{h: tar.Header{Name: "opaque/.wh.kept", Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}},
	)
	return mkTar(t, ents)
}

func build(t testing.TB, raw []byte) (string, Stats) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "layer.erofs")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := FromTar(context.Background(), bytes.NewReader(raw), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return img, st
}

func TestDeterministic(t *testing.T) {
	raw := richLayer(t)
	a, sa := build(t, raw)
	b, sb := build(t, raw)
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if sa != sb || !bytes.Equal(ba, bb) || int64(len(ba)) != sa.Bytes || sa.Bytes%blockSize != 0 {
		t.Fatalf("two builds of one stream differ: %+v %+v (%d, %d bytes)", sa, sb, len(ba), len(bb))
	}
	if d, err := Digest(bytes.NewReader(ba), int64(len(ba))); err != nil || d != sa.Digest || len(d) != 64 {
		t.Fatalf("digest while writing %s, of the file %s (%v)", sa.Digest, d, err)
	}
	ba2 := append([]byte(nil), ba...)
	ba2[len(ba2)-1] ^= 1
	if d, _ := Digest(bytes.NewReader(ba2), int64(len(ba2))); d == sa.Digest {
		t.Fatal("digest misses a change in the last byte")
	}
	ba2 = append([]byte(nil), ba...)
	ba2[superOffset+20] ^= 1
	if d, _ := Digest(bytes.NewReader(ba2), int64(len(ba2))); d == sa.Digest {
		t.Fatal("digest misses a change in the superblock")
	}
	if le := ba[superOffset : superOffset+4]; le[0] != 0xE2 || le[3] != 0xE0 {
		t.Fatalf("no EROFS magic: % x", le)
	}
	// Holes: the all-zero file takes no disk blocks of the image.
	var st unix.Stat_t
	if err := unix.Stat(a, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= sa.Bytes {
		t.Logf("image file is not sparse (%d of %d bytes allocated); the filesystem may not keep holes", st.Blocks*512, sa.Bytes)
	}
}

// TestRefusesHostileStreams: the rules of image.Unpack, checked on the
// writer (which writes nothing outside the image whatever it is fed).
func TestRefusesHostileStreams(t *testing.T) {
	cases := map[string]struct {
		ents []ent
		kind error
	}{
		"dotdot":          {[]ent{file("../../x", []byte("x"), 0o644)}, errdefs.ErrInvalidArgument},
		"nested dotdot":   {[]ent{file("a/../../x", []byte("x"), 0o644)}, errdefs.ErrInvalidArgument},
		"block device":    {[]ent{{h: tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8}}}, errdefs.ErrInvalidArgument},
		"char device":     {[]ent{{h: tar.Header{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}}}, errdefs.ErrInvalidArgument},
		"link to dir":     {[]ent{dirEnt("d", 0o755), {h: tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "d"}}}, errdefs.ErrInvalidArgument},
		"link to nothing": {[]ent{{h: tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "etc/shadow"}}}, errdefs.ErrInvalidArgument},
		"through symlink": {[]ent{{h: tar.Header{Name: "e", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, file("e/passwd", []byte("x"), 0o644)}, errdefs.ErrInvalidArgument},
		"bad whiteout":    {[]ent{{h: tar.Header{Name: "d/.wh..", Typeflag: tar.TypeReg}}}, errdefs.ErrInvalidArgument},
		"root as file":    {[]ent{file(".", []byte("x"), 0o644)}, errdefs.ErrInvalidArgument},
		"long name":       {[]ent{file(strings.Repeat("x", 256), []byte("x"), 0o644)}, errdefs.ErrInvalidArgument},
		"empty symlink":   {[]ent{{h: tar.Header{Name: "s", Typeflag: tar.TypeSymlink}}}, errdefs.ErrInvalidArgument},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "img"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = FromTar(context.Background(), bytes.NewReader(mkTar(t, c.ents)), f, Options{})
			if !errors.Is(err, c.kind) {
				t.Fatalf("got %v, want %v", err, c.kind)
			}
		})
	}
	// Negative control: a well-formed stream of the same kinds passes.
	f, err := os.Create(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ok := []ent{dirEnt("d", 0o755), file("d/x", []byte("x"), 0o644), {h: tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "d/x"}},
		{h: tar.Header{Name: "e", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, {h: tar.Header{Name: "d/.wh.y", Typeflag: tar.TypeReg}}}
	if _, err := FromTar(context.Background(), bytes.NewReader(mkTar(t, ok)), f, Options{}); err != nil {
		t.Fatalf("control: %v", err)
	}
	// Caps.
	for name, o := range map[string]Options{"entries": {MaxEntries: 3}, "file size": {MaxFileSize: 10}, "total": {MaxTotalBytes: 15}} {
		raw := mkTar(t, []ent{file("a", make([]byte, 8), 0o644), file("b", make([]byte, 11), 0o644), file("c", nil, 0o644), file("d", nil, 0o644)})
		if _, err := FromTar(context.Background(), bytes.NewReader(raw), f, o); !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Fatalf("cap %s: %v", name, err)
		}
	}
}

// describeTree is what a sandbox can observe of a tree: per path the type,
// mode, owner, size, content digest or link target, mtime (ns), link count
// and the opaque xattr.
func describeTree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" size=%d sha=%x nlink=%d", st.Size, sha256.Sum256(b), st.Nlink)
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		case unix.S_IFCHR:
			// A whiteout's mtime is when some unpack made it; nothing
			// of the sandbox's.
			out[rel] = desc + fmt.Sprintf(" rdev=%d", st.Rdev)
			return nil
		case unix.S_IFDIR:
			var v [4]byte
			n, _ := unix.Lgetxattr(p, "trusted.overlay.opaque", v[:])
			desc += fmt.Sprintf(" opaque=%q", v[:max(n, 0)])
		}
		if rel != "." {
			desc += fmt.Sprintf(" mtime=%d.%09d", st.Mtim.Sec, st.Mtim.Nsec)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diff(t testing.TB, want, got map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		if want[k] != got[k] {
			if bad++; bad <= 10 {
				t.Errorf("%s:\n  unpacked: %s\n  mounted:  %s", k, want[k], got[k])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d paths differ", bad, len(keys))
	}
}

func needRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount)")
	}
}

// mountImg mounts an image read-only; it skips where the kernel cannot.
func mountImg(t testing.TB, img string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount(img, dir, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOTBLK) {
			t.Skipf("kernel cannot mount an EROFS file: %v", err)
		}
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestMountedEqualsUnpacked: the kernel's view of the image is the tree
// image.Unpack makes from the same stream (what restore used before),
// path for path: type, mode, owner, content sha256, link target, mtime,
// link count, whiteouts and opaque dirs.
func TestMountedEqualsUnpacked(t *testing.T) {
	needRoot(t)
	raw := richLayer(t)
	img, st := build(t, raw)
	got := describeTree(t, mountImg(t, img))
	dst := t.TempDir()
	if err := os.Chmod(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := image.Unpack(context.Background(), bytes.NewReader(raw), dst, image.UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	want := describeTree(t, dst)
	diff(t, want, got)
	t.Logf("%d paths, %d inodes, image %d bytes", len(want), st.Inodes, st.Bytes)
	for _, p := range []string{"etc/hosts", "opaque", "opaque/kept", "home/user/longsym", "usr/bin/su"} {
		if _, ok := got[p]; !ok {
			t.Fatalf("%s missing from the mounted image", p)
		}
	}
	if !strings.Contains(got["etc/hosts"], "rdev=0") || !strings.Contains(got["opaque"], `opaque="y"`) {
		t.Fatalf("overlay markers: %q %q", got["etc/hosts"], got["opaque"])
	}
}

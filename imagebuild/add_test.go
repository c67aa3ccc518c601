package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// tent is one entry of a test tar.
type tent struct {
	name, body, link string
	typ              byte
	major, minor     int64
}

func tfile(name, body string) tent  { return tent{name: name, body: body, typ: tar.TypeReg} }
func tdir(name string) tent         { return tent{name: name, typ: tar.TypeDir} }
func tsym(name, target string) tent { return tent{name: name, link: target, typ: tar.TypeSymlink} }
func thard(name, target string) tent {
	return tent{name: name, link: target, typ: tar.TypeLink}
}

// mkTar writes entries owned by the caller (so the non-root tier can
// unpack them: the test is about where entries land, not who owns them).
func mkTar(t *testing.T, ents []tent, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644,
			Uid: os.Getuid(), Gid: os.Getgid(), ModTime: time.Unix(1700000000, 0),
			Devmajor: e.major, Devminor: e.minor, Format: tar.FormatPAX}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// treeState lists every path under base except those under skip, with
// what identifies its content (type, size, nlink, sha256 of a regular
// file): anything an unpack wrote or linked outside skip changes it.
func treeState(t *testing.T, base, skip string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(base, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			v += fmt.Sprintf(" nlink=%d", st.Nlink)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffState(a, b map[string]string) []string {
	var d []string
	for k, v := range b {
		if a[k] != v {
			d = append(d, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			d = append(d, k+" (removed)")
		}
	}
	sort.Strings(d)
	return d
}

// hostFile is what an escape would change in a host file the probes aim
// at: its existence, its link count (a hard link to /etc/shadow raises
// it) and whether it holds a probe's bytes. Not its whole content: the
// host may legitimately rewrite /etc/passwd (useradd) meanwhile.
func hostFile(p string) string {
	fi, err := os.Lstat(p)
	if err != nil {
		return "absent"
	}
	b, _ := os.ReadFile(p) // /etc/shadow is unreadable as a user: nlink still tells
	return fmt.Sprintf("%v nlink=%d probe=%v", fi.Mode().Type(), fi.Sys().(*syscall.Stat_t).Nlink,
		bytes.Contains(b, []byte("pwned")) || bytes.Contains(b, []byte("evil")))
}

// ADD of a hostile local archive (issue 17): every entry lands inside the
// destination or the archive is refused naming what it is, and nothing
// outside the destination (the rest of the build's scratch, the host's
// /etc) changes. The negative controls: a benign archive's file lands
// where expected, and the outside check catches a planted write.
func TestAddHostileArchive(t *testing.T) {
	base := t.TempDir()
	ctxDir := filepath.Join(base, "context")
	stg := filepath.Join(base, "stage", "copy-1") // like <tmp>/copy-*
	for _, d := range []string{ctxDir, stg} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "canary"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(ctxDir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	bd := &build{b: &Builder{opts: Options{MaxContextBytes: 1 << 30}}}
	hostPaths := []string{"/etc/evil", "/etc/passwd", "/etc/shadow", "/escape", "/passwd"}
	host := map[string]string{}
	for _, p := range hostPaths {
		host[p] = hostFile(p)
	}
	if host["/etc/evil"] != "absent" || host["/escape"] != "absent" {
		t.Fatalf("the host already has /etc/evil or /escape: cannot tell an escape")
	}
	dev := tent{name: "null", typ: tar.TypeChar, major: 1, minor: 3}
	blk := tent{name: "sda", typ: tar.TypeBlock, major: 8, minor: 0}

	for i, tc := range []struct {
		name string
		ents []tent
		gz   bool
		// wantErr: the refusal must say this; "" means the archive
		// unpacks and check holds.
		wantErr string
		check   func(t *testing.T, dest string)
	}{
		{name: "dotdot", ents: []tent{tfile("../../escape", "pwned")}, wantErr: "escapes the layer root"},
		{name: "dotdot-nested", ents: []tent{tdir("a/"), tfile("a/../../../escape", "pwned")}, wantErr: "escapes the layer root"},
		{name: "absolute", ents: []tent{tfile("/etc/evil", "evil")}, check: func(t *testing.T, dest string) {
			wantFile(t, filepath.Join(dest, "etc/evil"), "evil")
		}},
		{name: "symlink-then-file-dangling", ents: []tent{tsym("link", "/etc"), tfile("link/passwd", "pwned")},
			wantErr: `"link/passwd"`},
		{name: "symlink-then-file", gz: true,
			ents: []tent{tfile("/etc/evil", "evil"), tsym("link", "/etc"), tfile("link/passwd", "pwned")},
			check: func(t *testing.T, dest string) {
				// Resolved as if dest were /: dest/etc/passwd, the
				// symlink kept verbatim for the image.
				wantFile(t, filepath.Join(dest, "etc/passwd"), "pwned")
				if l, err := os.Readlink(filepath.Join(dest, "link")); err != nil || l != "/etc" {
					t.Errorf("link: %q %v, want the symlink to /etc kept", l, err)
				}
			}},
		{name: "hardlink-to-host-shadow", ents: []tent{thard("shadow", "/etc/shadow")}, wantErr: "hardlink target"},
		{name: "hardlink-through-symlink", ents: []tent{tsym("e", "/etc"), thard("shadow", "e/shadow")}, wantErr: "hardlink target"},
		{name: "hardlink-in-root",
			ents: []tent{tfile("etc/shadow", "own"), thard("shadow", "/etc/shadow")},
			check: func(t *testing.T, dest string) {
				// The link names the archive's own /etc/shadow.
				wantFile(t, filepath.Join(dest, "shadow"), "own")
				var a, b unix.Stat_t
				if unix.Lstat(filepath.Join(dest, "shadow"), &a) != nil || unix.Lstat(filepath.Join(dest, "etc/shadow"), &b) != nil || a.Ino != b.Ino {
					t.Errorf("shadow is not a hard link to dest/etc/shadow")
				}
			}},
		{name: "char-device", ents: []tent{dev}, wantErr: "device nodes are not allowed"},
		{name: "block-device", ents: []tent{blk}, wantErr: "device nodes are not allowed"},
		{name: "all-together",
			ents: []tent{tfile("/etc/evil", "evil"), tsym("link", "/etc"), tfile("link/passwd", "pwned"),
				thard("shadow", "/etc/shadow"), dev, tfile("../../escape", "pwned")},
			wantErr: "hardlink target"},
		{name: "benign", ents: []tent{tdir("dir/"), tfile("dir/file.txt", "hello")}, check: func(t *testing.T, dest string) {
			wantFile(t, filepath.Join(dest, "dir/file.txt"), "hello")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("a%d.tar", i)
			if tc.gz {
				name += ".gz"
			}
			if err := os.WriteFile(filepath.Join(ctxDir, name), mkTar(t, tc.ents, tc.gz), 0o644); err != nil {
				t.Fatal(err)
			}
			// The destination exists (copy mirrors the stage's
			// parents into the staging dir first).
			dest := filepath.Join(stg, "dst", tc.name)
			if err := os.MkdirAll(dest, 0o755); err != nil {
				t.Fatal(err)
			}
			before := treeState(t, base, dest)
			err := bd.addArchive(context.Background(), fd, name, dest, copyOpts{})
			t.Logf("%v", err)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "hostile or broken archive") ||
					!errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("got %v, want an invalid-argument refusal containing %q", err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("unpack: %v", err)
			default:
				tc.check(t, dest)
			}
			if d := diffState(before, treeState(t, base, dest)); len(d) != 0 {
				t.Errorf("written outside the destination: %v", d)
			}
			for _, p := range hostPaths {
				if got := hostFile(p); got != host[p] {
					t.Errorf("host %s changed: %q, was %q", p, got, host[p])
				}
			}
			// Whatever was created stays a plain tree: no device node.
			_ = filepath.WalkDir(dest, func(p string, de fs.DirEntry, err error) error {
				if err == nil && de.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
					t.Errorf("device node %s created", p)
				}
				return nil
			})
		})
	}

	// Negative control for the outside check: a write beside the
	// destination is seen.
	dest := filepath.Join(stg, "dst", "control")
	if err := os.MkdirAll(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	before := treeState(t, base, dest)
	if err := os.WriteFile(filepath.Join(stg, "escape"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d := diffState(before, treeState(t, base, dest)); len(d) != 1 || !strings.HasSuffix(d[0], "/escape") {
		t.Fatalf("the outside check missed a planted write: %v", d)
	}
}

func wantFile(t *testing.T, p, body string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != body {
		t.Errorf("%s: %q %v, want %q", p, b, err, body)
	}
}

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Breakout table for adversarial-checklist items 1-3, modeled on
// containerd's TestBreakouts. Each case unpacks into <T>/root next to a
// canary tree <T>/canary; afterwards the canary (content, nlink, xattrs)
// must be unchanged and nothing new may exist in <T>. The same table run
// through naiveUnpack (filepath.Join + os.Create) must disturb the canary
// for every case marked escapes, proving each probe can fail.
type breakout struct {
	name    string
	ents    func(base string) []ent // base is <T>, for absolute probes
	wantErr bool
	escapes bool // the naive unpacker must be caught
	host    bool // probes real host files; never run naively
	check   func(t *testing.T, dst, base string)
}

func breakouts() []breakout {
	canaryAbs := func(base string) string { return filepath.Join(base, "canary") }
	return []breakout{
		{name: "dotdot overwrite", wantErr: true, escapes: true,
			ents: func(string) []ent { return []ent{file("../canary/secret", "pwned")} }},
		{name: "dotdot create", wantErr: true, escapes: true,
			ents: func(string) []ent { return []ent{file("../pwned", "pwned")} }},
		{name: "nested dotdot", wantErr: true, escapes: true,
			ents: func(string) []ent { return []ent{dir("a/"), file("a/../../canary/secret", "pwned")} }},
		{name: "absolute name", escapes: true,
			ents:  func(b string) []ent { return []ent{file(canaryAbs(b)+"/secret", "pwned")} },
			check: func(t *testing.T, dst, b string) { wantContent(t, filepath.Join(dst, canaryAbs(b), "secret"), "pwned") }},
		{name: "dangling absolute symlink dir then file", wantErr: true, escapes: true,
			ents: func(b string) []ent { return []ent{symlink("e", canaryAbs(b)), file("e/secret", "pwned")} }},
		{name: "absolute symlink dir then file", escapes: true,
			ents: func(b string) []ent {
				return []ent{dir(canaryAbs(b) + "/"), symlink("e", canaryAbs(b)), file("e/secret", "pwned")}
			},
			check: func(t *testing.T, dst, b string) { wantContent(t, filepath.Join(dst, canaryAbs(b), "secret"), "pwned") }},
		{name: "relative symlink dir then file", escapes: true,
			ents:  func(string) []ent { return []ent{dir("canary/"), symlink("e", "../canary"), file("e/secret", "pwned")} },
			check: func(t *testing.T, dst, _ string) { wantContent(t, filepath.Join(dst, "canary/secret"), "pwned") }},
		{name: "symlink dotdot chain", escapes: true,
			ents: func(string) []ent {
				return []ent{dir("canary/"), symlink("up", ".."), symlink("up2", "up/canary"), file("up2/secret", "pwned")}
			},
			check: func(t *testing.T, dst, _ string) { wantContent(t, filepath.Join(dst, "canary/secret"), "pwned") }},
		{name: "symlink chain through dirs", escapes: true,
			ents: func(string) []ent {
				return []ent{dir("canary/"), dir("a/"), symlink("a/b", "../.."), symlink("c", "a/b/canary"), file("c/new", "pwned")}
			},
			check: func(t *testing.T, dst, _ string) { wantContent(t, filepath.Join(dst, "canary/new"), "pwned") }},
		{name: "file over symlink", escapes: true,
			ents:  func(b string) []ent { return []ent{symlink("f", canaryAbs(b)+"/secret"), file("f", "pwned")} },
			check: func(t *testing.T, dst, _ string) { wantContent(t, filepath.Join(dst, "f"), "pwned") }},
		{name: "dir swapped for symlink then file", escapes: true,
			ents: func(b string) []ent {
				return []ent{dir(canaryAbs(b) + "/"), dir("a/"), file("a/x", "ok"), symlink("a", canaryAbs(b)), file("a/secret", "pwned")}
			},
			check: func(t *testing.T, dst, b string) { wantContent(t, filepath.Join(dst, canaryAbs(b), "secret"), "pwned") }},
		{name: "hardlink absolute", wantErr: true, escapes: true,
			ents: func(b string) []ent { return []ent{hardlink("x", canaryAbs(b)+"/secret")} }},
		{name: "hardlink dotdot", wantErr: true, escapes: true,
			ents: func(string) []ent { return []ent{hardlink("x", "../canary/secret")} }},
		{name: "hardlink through symlinked dir", wantErr: true, escapes: true,
			ents: func(b string) []ent { return []ent{symlink("d", canaryAbs(b)), hardlink("x", "d/secret")} }},
		{name: "hardlink to outward symlink", escapes: false,
			ents: func(b string) []ent {
				return []ent{symlink("s", canaryAbs(b)+"/secret"), hardlink("h", "s")}
			},
			check: func(t *testing.T, dst, _ string) {
				if fi, err := os.Lstat(filepath.Join(dst, "h")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
					t.Errorf("h should be a hardlink of the symlink itself: %v %v", fi, err)
				}
			}},
		{name: "whiteout dotdot", wantErr: true, escapes: true,
			ents: func(string) []ent { return []ent{file("../canary/.wh.secret", "")} }},
		{name: "whiteout through symlinked dir", escapes: true,
			ents: func(b string) []ent {
				return []ent{dir(canaryAbs(b) + "/"), symlink("e", canaryAbs(b)), file("e/.wh.secret", "")}
			}},
		{name: "dangling whiteout through symlinked dir", wantErr: true, escapes: true,
			ents: func(b string) []ent { return []ent{symlink("e", canaryAbs(b)), file("e/.wh.secret", "")} }},
		{name: "opaque under symlinked dir", escapes: true,
			ents: func(b string) []ent {
				return []ent{dir(canaryAbs(b) + "/"), symlink("e", canaryAbs(b)), file("e/.wh..wh..opq", "")}
			}},
		{name: "dangling opaque under symlinked dir", wantErr: true, escapes: true,
			ents: func(b string) []ent { return []ent{symlink("e", canaryAbs(b)), file("e/.wh..wh..opq", "")} }},
		{name: "whiteout of parent", wantErr: true, escapes: true,
			ents: func(string) []ent { return []ent{file(".wh..", "")} }},
		{name: "whiteout of root", wantErr: true,
			ents: func(string) []ent { return []ent{file("/.wh.", "")} }},
		{name: "char device", wantErr: true,
			ents: func(string) []ent { return []ent{{name: "null", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 3}} }},
		{name: "block device", wantErr: true,
			ents: func(string) []ent { return []ent{{name: "sda", typ: tar.TypeBlock, mode: 0o660, major: 8, minor: 0}} }},
		{name: "root as file", wantErr: true,
			ents: func(string) []ent { return []ent{file(".", "x")} }},
		{name: "host etc via symlink", host: true,
			ents: func(string) []ent {
				return []ent{dir("etc/"), symlink("e", "/etc"), file("e/"+hostCanary, "pwned")}
			},
			check: func(t *testing.T, dst, _ string) { wantContent(t, filepath.Join(dst, "etc", hostCanary), "pwned") }},
		{name: "host canary hardlink", host: true, wantErr: true,
			ents: func(string) []ent { return []ent{hardlink("x", "/etc/"+hostCanary)} }},
		{name: "host shadow hardlink", host: true, wantErr: true,
			ents: func(string) []ent { return []ent{hardlink("shadow", "/etc/shadow")} }},
		{name: "host shadow hardlink via symlink", host: true, wantErr: true,
			ents: func(string) []ent { return []ent{symlink("e", "/etc"), hardlink("shadow", "e/shadow")} }},
		{name: "host whiteout via symlink", host: true,
			ents: func(string) []ent {
				return []ent{dir("etc/"), symlink("e", "/etc"), file("e/.wh."+hostCanary, ""), file("e/.wh..wh..opq", "")}
			}},
	}
}

func wantContent(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != want {
		t.Errorf("%s = %q, %v; want %q", p, b, err, want)
	}
}

// setupCanary makes <T>/canary/{secret,sub/deep} and <T>/root.
func setupCanary(t *testing.T) (base, dst string) {
	base = t.TempDir()
	must(t, os.MkdirAll(filepath.Join(base, "canary/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "canary/secret"), []byte("canary"), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "canary/sub/deep"), []byte("deep"), 0o644))
	dst = filepath.Join(base, "root")
	must(t, os.Mkdir(dst, 0o755))
	return base, dst
}

// census describes everything in base outside root: names, types, content
// hashes, link counts and xattr names.
func census(t *testing.T, base string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if rel == "root" {
			return filepath.SkipDir
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v nlink=%d", rel, fi.Mode(), st.Nlink)
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" sha=%x", sha256.Sum256(b))
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil && n > 0 {
			line += " xattrs=" + strings.ReplaceAll(string(buf[:n]), "\x00", ",")
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		lines = append(lines, "walk error: "+err.Error())
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// hostCanary is a file under the host's /etc that the host cases aim at
// (never at real system files, so that a regression in Unpack can only
// clobber the canary). /etc/shadow is only ever a hardlink target, which
// at worst raises its link count.
var hostCanary = fmt.Sprintf("berth-unpack-canary-%d", os.Getpid())

func ensureHostCanary(t *testing.T) {
	p := "/etc/" + hostCanary
	must(t, os.WriteFile(p, []byte("host canary"), 0o644))
	t.Cleanup(func() { os.Remove(p) })
}

// hostState fingerprints the real host files the host cases aim at.
func hostState(t *testing.T) string {
	var out []string
	for _, p := range []string{"/etc/" + hostCanary, "/etc/passwd", "/etc/shadow"} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			out = append(out, p+" missing")
			continue
		}
		b, _ := os.ReadFile(p)
		out = append(out, fmt.Sprintf("%s nlink=%d sha=%x", p, st.Nlink, sha256.Sum256(b)))
	}
	return strings.Join(out, "\n")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnpackBreakouts(t *testing.T) {
	needRoot(t)
	ensureHostCanary(t)
	for _, tc := range breakouts() {
		t.Run(tc.name, func(t *testing.T) {
			base, dst := setupCanary(t)
			before, hostBefore := census(t, base), hostState(t)
			err := Unpack(context.Background(), bytes.NewReader(mkTar(t, tc.ents(base)...)), dst, UnpackOptions{})
			if tc.wantErr && err == nil {
				t.Errorf("unpack succeeded; want an error")
			}
			if !tc.wantErr && err != nil {
				t.Errorf("unpack: %v", err)
			}
			if after := census(t, base); after != before {
				t.Errorf("outside of dst changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if h := hostState(t); h != hostBefore {
				t.Errorf("HOST FILES CHANGED:\n%s\n->\n%s", hostBefore, h)
			}
			assertNoDevices(t, dst)
			if tc.check != nil && err == nil {
				tc.check(t, dst, base)
			}
		})
	}
}

// TestUnpackBreakoutsNegativeControl runs the escape cases through a
// deliberately naive unpacker: each must disturb the canary, otherwise the
// probe above could be passing vacuously.
func TestUnpackBreakoutsNegativeControl(t *testing.T) {
	needRoot(t)
	n := 0
	for _, tc := range breakouts() {
		if !tc.escapes || tc.host {
			continue
		}
		n++
		t.Run(tc.name, func(t *testing.T) {
			base, dst := setupCanary(t)
			before := census(t, base)
			_ = naiveUnpack(bytes.NewReader(mkTar(t, tc.ents(base)...)), dst)
			if after := census(t, base); after == before {
				t.Errorf("naive unpacker did not disturb the canary: the probe is broken")
			}
		})
	}
	if n < 10 {
		t.Fatalf("only %d escape cases", n)
	}
}

func assertNoDevices(t *testing.T, dst string) {
	t.Helper()
	filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if fi.Mode()&os.ModeDevice != 0 {
			st := fi.Sys().(*syscall.Stat_t)
			if st.Rdev != 0 {
				t.Errorf("device node %s (rdev %d) created", p, st.Rdev)
			}
		}
		return nil
	})
}

// naiveUnpack is the bug class Unpack defends against: host path joins,
// calls that follow symlinks, absolute names and link targets taken as is.
// Test only.
func naiveUnpack(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := h.Name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dst, p)
		}
		base := filepath.Base(h.Name)
		switch {
		case base == whiteoutOpaque:
			unix.Setxattr(filepath.Dir(p), opaqueXattr, []byte("y"), 0)
		case strings.HasPrefix(base, whiteoutPrefix):
			os.RemoveAll(filepath.Join(filepath.Dir(p), strings.TrimPrefix(base, whiteoutPrefix)))
		case h.Typeflag == tar.TypeDir:
			os.MkdirAll(p, 0o755)
		case h.Typeflag == tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			f, err := os.Create(p)
			if err != nil {
				continue
			}
			io.Copy(f, tr)
			f.Close()
		case h.Typeflag == tar.TypeSymlink:
			os.RemoveAll(p)
			os.Symlink(h.Linkname, p)
		case h.Typeflag == tar.TypeLink:
			target := h.Linkname
			if !filepath.IsAbs(target) {
				target = filepath.Join(dst, target)
			}
			os.Link(target, p)
		}
	}
}

package snapshot

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// imageLayer is a stand-in base image.
func imageLayer(t *testing.T) string {
	l := t.TempDir()
	mustWrite(t, filepath.Join(l, "etc/passwd"), "root:x:0:0::/root:/bin/sh\n", 0o644)
	mustWrite(t, filepath.Join(l, "etc/hosts"), "127.0.0.1 localhost\n", 0o644)
	mustWrite(t, filepath.Join(l, "usr/lib/a.so"), "lib a", 0o755)
	mustWrite(t, filepath.Join(l, "usr/lib/b.so"), "lib b", 0o755)
	mustWrite(t, filepath.Join(l, "app/node_modules/x/index.js"), "x", 0o644)
	mustWrite(t, filepath.Join(l, "app/node_modules/y/index.js"), "y", 0o644)
	mustWrite(t, filepath.Join(l, "app/package.json"), "{}", 0o644)
	mustWrite(t, filepath.Join(l, "hand/h1"), "base h1", 0o644)
	mustWrite(t, filepath.Join(l, "f3"), "file f3", 0o644)
	mustWrite(t, filepath.Join(l, "d3/e"), "base e", 0o644)
	must(t, os.Symlink("usr/lib", filepath.Join(l, "lib")))
	return l
}

// TestCaptureRestoresMergedView takes a real overlay, changes it through
// the merged mount, captures the upper, restores it as a lower and checks
// the new overlay shows exactly what the old one did.
func TestCaptureRestoresMergedView(t *testing.T) {
	needRoot(t)
	l1 := imageLayer(t)
	upper := filepath.Join(t.TempDir(), "upper")
	must(t, os.Mkdir(upper, 0o755))
	m := mountOverlay(t, []string{l1}, upper)

	must(t, os.Remove(filepath.Join(m, "etc/hosts")))              // whiteout of a lower file
	must(t, os.RemoveAll(filepath.Join(m, "app/node_modules")))    // whiteout of a lower dir
	must(t, os.Mkdir(filepath.Join(m, "app/node_modules"), 0o755)) // ... recreated: opaque
	mustWrite(t, filepath.Join(m, "app/node_modules/z/index.js"), "z", 0o644)
	mustWrite(t, filepath.Join(m, "etc/passwd"), "root:x:0:0::/root:/bin/bash\n", 0o644) // copy-up
	must(t, os.Chmod(filepath.Join(m, "usr/lib/a.so"), 0o700))                           // metadata-only change
	must(t, os.Rename(filepath.Join(m, "usr/lib/b.so"), filepath.Join(m, "usr/lib/c.so")))
	mustWrite(t, filepath.Join(m, "home/user/notes.txt"), "hello", 0o600)
	must(t, os.Symlink("/etc/passwd", filepath.Join(m, "home/user/pw")))
	must(t, os.Link(filepath.Join(m, "home/user/notes.txt"), filepath.Join(m, "home/user/notes2.txt")))
	must(t, os.Remove(filepath.Join(m, "lib")))
	must(t, os.Mkdir(filepath.Join(m, "lib"), 0o755)) // dir where a lower symlink was

	want := describe(t, m, true)
	unmount(m)

	// The upper really is in overlay form (else the test proves nothing).
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(upper, "etc/hosts"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatal("overlay did not leave a 0:0 whiteout for etc/hosts")
	}
	if !isOpaqueDir(filepath.Join(upper, "app/node_modules")) {
		t.Fatal("overlay did not mark the recreated dir opaque")
	}

	blob, _ := capture(t, []string{upper}, CaptureOptions{})
	l2 := unpackTo(t, blob)

	// Restored as a read-only lower under a fresh upper (how a sandbox
	// is started from a snapshot).
	fresh := filepath.Join(t.TempDir(), "upper")
	must(t, os.Mkdir(fresh, 0o755))
	m2 := mountOverlay(t, []string{l1, l2}, fresh)
	got := describe(t, m2, true)
	diffTrees(t, want, got)
	if _, err := os.Stat(filepath.Join(m2, "app/node_modules/x")); !os.IsNotExist(err) {
		t.Fatalf("opaque dir leaks a lower entry: %v", err)
	}

	// Negative control: the same layer with its opaque marker stripped
	// lets the deleted lower content through, so the comparison above
	// would catch a capture that lost it.
	must(t, unix.Removexattr(filepath.Join(l2, "app/node_modules"), xattrOpaque))
	m3 := mountOverlay(t, []string{l1, l2}, "")
	if _, err := os.Stat(filepath.Join(m3, "app/node_modules/x/index.js")); err != nil {
		t.Fatalf("negative control: without the opaque xattr the lower dir should show: %v", err)
	}
}

func isOpaqueDir(p string) bool {
	var v [2]byte
	n, err := unix.Lgetxattr(p, xattrOpaque, v[:])
	return err == nil && n == 1 && v[0] == 'y'
}

package rootfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountRootAgreesWithMountinfo: the statx answer that spares a
// mountinfo read says "mounted" exactly where mountinfo lists a mount
// point: a tmpfs mounted on a dir (and a second one stacked on it), and
// not the dir below it, a plain dir, a file or a missing path.
func TestMountRootAgreesWithMountinfo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := t.TempDir()
	mnt, plain, sub := filepath.Join(dir, "mnt"), filepath.Join(dir, "plain"), filepath.Join(dir, "mnt", "sub")
	for _, d := range []string{mnt, plain} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	inMountinfo := func(p string) bool {
		ms, err := mounts()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ms {
			if e.Point == p {
				return true
			}
		}
		return false
	}
	check := func(when string) {
		t.Helper()
		for _, p := range []string{mnt, sub, plain, file, filepath.Join(dir, "missing")} {
			root, known := mountRoot(p)
			if !known {
				t.Fatalf("%s: statx cannot tell whether %s is a mount point on this kernel", when, p)
			}
			if want := inMountinfo(p); root != want {
				t.Errorf("%s: mountRoot(%s) = %v, mountinfo says %v", when, p, root, want)
			}
			m := &Manager{}
			if _, ok, err := m.mountAt(p); err != nil || ok != inMountinfo(p) {
				t.Errorf("%s: mountAt(%s) = %v, %v", when, p, ok, err)
			}
		}
	}
	check("before mounting")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for unix.Unmount(mnt, unix.MNT_DETACH) == nil {
		}
	})
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	check("with a tmpfs")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	check("with two stacked")
	m := &Manager{}
	if err := m.unmountAt(mnt); err != nil {
		t.Fatal(err)
	}
	if inMountinfo(mnt) {
		t.Errorf("unmountAt left %s mounted", mnt)
	}
	check("after unmountAt")
	// Nothing is mounted below a path that is not there.
	if err := unmountUnder(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("unmountUnder of a missing dir: %v", err)
	}
}

// TestRemoveViews: the idmapped views' fast removal unmounts l/<n> and u
// and removes the dir; with anything else in there it declines (false)
// and deletes nothing below a mount or a foreign entry — the negative
// control — leaving the rest to the mountinfo path.
func TestRemoveViews(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	mk := func(t *testing.T) (string, []string) {
		dir := filepath.Join(t.TempDir(), "idmap")
		views := []string{filepath.Join(dir, "l", "0"), filepath.Join(dir, "l", "1"), filepath.Join(dir, "u")}
		for _, v := range views {
			if err := os.MkdirAll(v, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", v, "tmpfs", 0, "size=1m"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(v, "keep"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for unix.Unmount(v, unix.MNT_DETACH) == nil {
				}
			})
		}
		return dir, views
	}
	t.Run("views only", func(t *testing.T) {
		dir, views := mk(t)
		if !removeViews(dir) {
			t.Fatal("removeViews declined a dir holding only views")
		}
		for _, v := range views {
			if root, _ := mountRoot(v); root {
				t.Errorf("%s still mounted", v)
			}
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", dir, err)
		}
	})
	t.Run("foreign entry", func(t *testing.T) {
		dir, _ := mk(t)
		foreign := filepath.Join(dir, "l", "x", "data")
		if err := os.MkdirAll(filepath.Dir(foreign), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(foreign, []byte("y"), 0o600); err != nil {
			t.Fatal(err)
		}
		if removeViews(dir) {
			t.Fatal("removeViews removed a dir holding a foreign, non-empty entry")
		}
		if b, err := os.ReadFile(foreign); err != nil || string(b) != "y" {
			t.Errorf("foreign file after removeViews: %q %v", b, err)
		}
		// The mountinfo path finishes the job.
		if err := unmountUnder(dir); err != nil {
			t.Fatal(err)
		}
	})
}

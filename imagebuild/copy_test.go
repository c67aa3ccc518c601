package imagebuild

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// A context's symlinks lead only back into the context: a top-level source
// that is a symlink to /etc is resolved as the context's own /etc, and
// symlinks below a copied directory are copied as symlinks, never read.
func TestCopyStaysInRoot(t *testing.T) {
	ctx := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	os.MkdirAll(filepath.Join(ctx, "dir"), 0o755)
	os.WriteFile(filepath.Join(ctx, "dir", "f"), []byte("ok"), 0o644)
	os.Symlink(secret, filepath.Join(ctx, "dir", "abs"))
	os.Symlink("../../../../../.."+secret, filepath.Join(ctx, "dir", "rel"))
	os.Symlink(outside, filepath.Join(ctx, "out"))
	os.Symlink(secret, filepath.Join(ctx, "top"))
	fd, err := unix.Open(ctx, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	// The test is about resolution, not ownership: copied files get the
	// caller's own ids, so it runs unprivileged too (the non-root tier).
	opts := copyOpts{own: owner{uid: os.Getuid(), gid: os.Getgid()}}
	dst := t.TempDir()
	if err := copySource(fd, "dir", filepath.Join(dst, "d"), opts); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "d", "f")); string(b) != "ok" {
		t.Fatalf("negative control: the plain file was not copied (%q)", b)
	}
	for _, l := range []string{"abs", "rel"} {
		fi, err := os.Lstat(filepath.Join(dst, "d", l))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s: copied as %v (%v), want a symlink", l, fi, err)
		}
	}
	// Following the top-level symlinks resolves inside the context,
	// where there is no such file.
	for _, src := range []string{"top", "out/secret"} {
		err := copySource(fd, src, filepath.Join(dst, "x"), opts)
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("%s: %v, want not found (resolved inside the context)", src, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "x")); !os.IsNotExist(err) {
		t.Fatal("something was written for a refused source")
	}
	// Negative control: the same file inside the context is copied.
	os.MkdirAll(filepath.Join(ctx, outside), 0o755)
	os.WriteFile(filepath.Join(ctx, secret), []byte("in context"), 0o644)
	if err := copySource(fd, "top", filepath.Join(dst, "y"), opts); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "y")); string(b) != "in context" {
		t.Fatalf("top-level symlink resolved to %q, want the context's copy", b)
	}
}

package fs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/blobtest"
	"github.com/berth-sh/berth/internal/errdefs"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) (blob.Store, blobtest.Tamperer) {
		s := open(t, t.TempDir())
		return s, func(t *testing.T, key string) {
			p := filepath.Join(s.Dir(), filepath.FromSlash(dataPath(key)))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[headerLen] ^= 0xff // first content byte; header untouched
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A crash mid-Put leaves a file in tmp/: it must never be listed, and the
// next New must remove it.
func TestCrashDebrisCleanedByNew(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if _, err := s.Put(ctx, "real", strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	debris := filepath.Join(dir, tmpDir, "0123456789abcdef")
	if err := os.WriteFile(debris, bytes.Repeat([]byte("half"), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Key != "real" {
		t.Fatalf("List = %+v, %v; want only real", list, err)
	}
	s.Close()
	s2 := open(t, dir)
	if _, err := os.Stat(debris); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file survived New: %v", err)
	}
	if _, err := s2.Stat(ctx, "real"); err != nil {
		t.Fatalf("New lost a real blob: %v", err)
	}
}

// A data file whose length disagrees with its header (a torn copy, a
// truncation by another tool) is reported corrupt by Stat, not served.
func TestTruncatedFileIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if _, err := s.Put(ctx, "k", strings.NewReader("0123456789"), ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "blobs", "k"+suffix), headerLen+5); err != nil {
		t.Fatal(err)
	}
	_, err := s.Stat(ctx, "k")
	if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Stat(truncated) = %v, want corrupt", err)
	}
}

// A symlink planted inside the store must not let a Put write outside it.
func TestSymlinkInStoreCannotEscape(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	s := open(t, dir)
	if err := os.Symlink(outside, filepath.Join(dir, "blobs", "evil")); err != nil {
		t.Fatal(err)
	}
	// Negative control: through the plain filesystem the link does lead
	// outside, so the probe below is meaningful.
	if fi, err := os.Stat(filepath.Join(dir, "blobs", "evil")); err != nil || !fi.IsDir() {
		t.Fatalf("control: symlink does not resolve: %v", err)
	}
	_, err := s.Put(context.Background(), "evil/x", strings.NewReader("pwn"), "")
	if err == nil {
		t.Fatal("Put through a symlink to outside the store succeeded")
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 0 {
		t.Fatalf("Put wrote %d entries outside the store", len(ents))
	}
}

// A full disk is ResourceExhausted with a clear message and leaves no
// partial blob and no temp file behind.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a 1 MiB tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "berth-blobtest", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	s := open(t, mnt)
	ctx := context.Background()
	// Negative control: something that fits is stored.
	if _, err := s.Put(ctx, "fits", bytes.NewReader(make([]byte, 100<<10)), ""); err != nil {
		t.Fatalf("control Put: %v", err)
	}
	_, err := s.Put(ctx, "toobig", bytes.NewReader(make([]byte, 4<<20)), "")
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("Put on a full disk = %v, want resource exhausted", err)
	}
	if !strings.Contains(err.Error(), "full") {
		t.Errorf("message %q does not say the store is full", err)
	}
	if _, err := s.Stat(ctx, "toobig"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("partial blob visible: %v", err)
	}
	ents, err := os.ReadDir(filepath.Join(mnt, tmpDir))
	if err != nil || len(ents) != 0 {
		t.Fatalf("temp files left after ENOSPC: %d, %v", len(ents), err)
	}
	list, err := s.List(ctx, "")
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	// Space is reclaimed: the same store keeps working.
	if _, err := s.Put(ctx, "after", strings.NewReader("ok"), ""); err != nil {
		t.Fatalf("Put after ENOSPC: %v", err)
	}
}

// Two Stores on one directory would empty each other's tmp/.
func TestSecondOpenRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := New(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second New = %v, want failed precondition", err)
	}
	s.Close()
	open(t, dir) // control: free again once closed
}

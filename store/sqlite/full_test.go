package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// TestDiskFull fills a small tmpfs under the state store: the write that
// does not fit is resource_exhausted and says the disk is full, a
// multi-key storage commit is all or nothing, what was committed before
// stays readable, and writes succeed again once there is room.
func TestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ObjectCommit(ctx, "o", []store.ObjectWrite{{Key: "first", Value: []byte(`"kept"`)}}); err != nil {
		t.Fatal(err)
	}
	value := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	var full error
	for i := 0; i < 64 && full == nil; i++ {
		// Four keys per commit: a commit that does not fit must leave
		// none of its keys.
		var ws []store.ObjectWrite
		for k := 0; k < 4; k++ {
			ws = append(ws, store.ObjectWrite{Key: fmt.Sprintf("k%03d-%d", i, k), Value: value})
		}
		full = s.ObjectCommit(ctx, "o", ws)
	}
	if !errors.Is(full, errdefs.ErrResourceExhausted) || !strings.Contains(full.Error(), "disk is full") {
		t.Fatalf("writing past a 1 MiB disk: %v, want resource_exhausted saying the disk is full", full)
	}
	t.Logf("the refused write: %v", full)
	kvs, err := s.ObjectList(ctx, "o", "k", "", 1000)
	if err != nil {
		t.Fatalf("list after the full disk: %v", err)
	}
	got := map[string]int{}
	for _, kv := range kvs {
		got[kv.Key[:4]]++
		if !bytes.Equal(kv.Value, value) {
			t.Fatalf("%s holds %d bytes, want %d", kv.Key, len(kv.Value), len(value))
		}
	}
	for batch, n := range got {
		if n != 4 {
			t.Fatalf("commit %s left %d of its 4 keys", batch, n)
		}
	}
	if v, ok, err := s.ObjectGet(ctx, "o", "first"); err != nil || !ok || string(v) != `"kept"` {
		t.Fatalf("the first key after the full disk: %q %v %v", v, ok, err)
	}
	// Room again: the same write goes through.
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=16m"); err != nil {
		t.Fatalf("grow tmpfs: %v", err)
	}
	if err := s.ObjectCommit(ctx, "o", []store.ObjectWrite{{Key: "after", Value: value}}); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
}

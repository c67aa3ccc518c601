package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
)

// TestDiskFull puts the durable objects' table in a tablespace on a 1 MiB
// tmpfs and fills it: the write that does not fit is no space (SQLSTATE
// 53100) and says the disk is full, a multi-key commit is all or nothing,
// what was committed before stays readable, and writes succeed again once
// there is room. (The SQLite store's TestDiskFull, on PostgreSQL.)
func TestDiskFull(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Shared(t)
	if !srv.Local() {
		t.Skip("needs a server this test started: it mounts a small tmpfs for a tablespace on the server's machine")
	}
	dir, err := os.MkdirTemp("", "berth-pg-full-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	loc := filepath.Join(dir, "ts")
	if err := os.Mkdir(loc, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := srv.Chown(loc); err != nil {
		t.Fatal(err)
	}
	admin := func(dsn, sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ts := "berth_full_" + strings.TrimPrefix(filepath.Base(dir), "berth-pg-full-")
	admin(srv.DSN("postgres"), fmt.Sprintf("CREATE TABLESPACE %s LOCATION '%s'", ts, loc))
	// Registered before the database exists, so it runs after the
	// database is dropped (cleanups run last first).
	t.Cleanup(func() { admin(srv.DSN("postgres"), "DROP TABLESPACE IF EXISTS "+ts) })
	dsn := srv.NewDB(t)
	s := openDSN(t, dsn)
	admin(dsn, "ALTER TABLE object_kv SET TABLESPACE "+ts) // its TOAST table moves with it

	if err := s.ObjectCommit(ctx, "o", []store.ObjectWrite{{Key: "first", Value: []byte(`"kept"`)}}); err != nil {
		t.Fatal(err)
	}
	// Incompressible values, so they take their size on disk.
	value := make([]byte, 64<<10)
	rand.Read(value)
	var full error
	for i := 0; i < 64 && full == nil; i++ {
		var ws []store.ObjectWrite
		for k := 0; k < 4; k++ {
			ws = append(ws, store.ObjectWrite{Key: fmt.Sprintf("k%03d-%d", i, k), Value: value})
		}
		full = s.ObjectCommit(ctx, "o", ws)
	}
	if !errors.Is(full, errdefs.ErrNoSpace) || !errdefs.IsKind(full, errdefs.ErrNoSpace) || !strings.Contains(full.Error(), "disk is full") {
		t.Fatalf("writing past a 1 MiB tablespace: %v, want no space saying the disk is full", full)
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
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, "size=16m,mode=0755"); err != nil {
		t.Fatalf("grow tmpfs: %v", err)
	}
	if err := s.ObjectCommit(ctx, "o", []store.ObjectWrite{{Key: "after", Value: value}}); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
}

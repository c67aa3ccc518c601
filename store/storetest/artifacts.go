package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

func runArtifacts(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	t.Run("Snapshots", func(t *testing.T) {
		s := open(t)
		now := time.Now().UTC().Round(time.Millisecond)
		mk := func(id, sandbox, name string, created time.Time, exp time.Duration) store.Snapshot {
			return store.Snapshot{ID: id, Sandbox: sandbox, Name: name, SHA256: "ab", CreatedAt: created, ExpiresAt: now.Add(exp)}
		}
		for _, sn := range []store.Snapshot{
			mk("s1", "a", "base", now, time.Hour),
			mk("s2", "a", "", now.Add(time.Second), time.Hour),
			mk("s3", "b", "base", now.Add(2*time.Second), time.Hour),
			mk("old", "b", "", now, -time.Minute),
		} {
			if err := s.PutSnapshot(ctx, sn); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.GetSnapshot(ctx, "old"); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "snapshot old not found" {
			t.Fatalf("expired snapshot: %v", err)
		}
		got, err := s.GetSnapshot(ctx, "s1")
		if err != nil || got.Sandbox != "a" || got.Name != "base" || !got.ExpiresAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("get: %+v %v", got, err)
		}
		for _, c := range []struct {
			sandbox, name string
			want          []string
		}{{"", "", []string{"s1", "s2", "s3"}}, {"a", "", []string{"s1", "s2"}}, {"", "base", []string{"s1", "s3"}}, {"b", "base", []string{"s3"}}} {
			list, err := s.ListSnapshots(ctx, c.sandbox, c.name)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, sn := range list {
				ids = append(ids, sn.ID)
			}
			if len(ids) != len(c.want) {
				t.Fatalf("list(%q,%q) = %v, want %v", c.sandbox, c.name, ids, c.want)
			}
			for i := range ids {
				if ids[i] != c.want[i] {
					t.Fatalf("list(%q,%q) = %v, want %v", c.sandbox, c.name, ids, c.want)
				}
			}
		}
		exp, _ := s.ExpiredSnapshots(ctx, now)
		if len(exp) != 1 || exp[0].ID != "old" {
			t.Fatalf("expired: %+v", exp)
		}
		if err := s.TouchSnapshot(ctx, "old", now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSnapshot(ctx, "old"); err != nil {
			t.Fatalf("renewed snapshot: %v", err)
		}
		if err := s.TouchSnapshot(ctx, "nope", now); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("touch missing: %v", err)
		}
		if err := s.DeleteSnapshot(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSnapshot(ctx, "s1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	})
	t.Run("Backups", func(t *testing.T) {
		s := open(t)
		now := time.Now().UTC()
		if err := s.PutBackup(ctx, store.Backup{ID: "b1", Sandbox: "a", Dir: "/home/user/x", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := s.PutBackup(ctx, store.Backup{ID: "b2", Sandbox: "c", CreatedAt: now, ExpiresAt: now.Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		b, err := s.GetBackup(ctx, "b1")
		if err != nil || b.Dir != "/home/user/x" {
			t.Fatalf("get: %+v %v", b, err)
		}
		if b, err := s.GetBackup(ctx, "b2"); !errors.Is(err, errdefs.ErrExpired) || b.Sandbox != "c" || !strings.Contains(err.Error(), "expired at") {
			t.Fatalf("expired backup: %+v %v", b, err)
		}
		list, _ := s.ListBackups(ctx, "")
		if len(list) != 1 || list[0].ID != "b1" {
			t.Fatalf("list: %+v", list)
		}
		if err := s.DeleteBackup(ctx, "b1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetBackup(ctx, "b1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	})
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Run runs the suite. open must return a fresh, empty store each call.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	runArtifacts(t, open)
	runObjects(t, open)
	runCluster(t, open)
	runTakeover(t, open)
	runVolumes(t, open)
	t.Run("CRUD", func(t *testing.T) {
		s := open(t)
		if _, err := s.Get(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Get missing: want not found, got %v", err)
		}
		sb := store.Sandbox{Name: "a", ID: "id-a", State: api.StateStarting, Env: map[string]string{"K": "V"},
			Labels: map[string]string{"team": "x"}, SleepAfter: 10 * time.Minute, CreatedAt: time.Now().Round(time.Millisecond)}
		v, err := s.Put(ctx, sb)
		if err != nil || v != 1 {
			t.Fatalf("insert: v=%d err=%v", v, err)
		}
		if _, err := s.Put(ctx, sb); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("double insert: want already exists, got %v", err)
		}
		got, err := s.Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != "id-a" || got.Env["K"] != "V" || got.Labels["team"] != "x" || got.Version != 1 || got.SleepAfter != 10*time.Minute {
			t.Fatalf("round trip mismatch: %+v", got)
		}
		got.State = api.StateRunning
		if v, err = s.Put(ctx, got); err != nil || v != 2 {
			t.Fatalf("update: v=%d err=%v", v, err)
		}
		// A stale writer (still holding version 1) must be refused.
		if _, err := s.Put(ctx, got); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("stale update: want failed precondition, got %v", err)
		}
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatalf("delete missing: %v", err)
		}
		if _, err := s.Get(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	})
	t.Run("ListAndAlarms", func(t *testing.T) {
		s := open(t)
		now := time.Now()
		for i, at := range []time.Time{now.Add(-time.Minute), now.Add(time.Hour), {}} {
			if _, err := s.Put(ctx, store.Sandbox{Name: fmt.Sprintf("s%d", i), State: api.StateRunning, SleepAt: at}); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.List(ctx)
		if err != nil || len(all) != 3 || all[0].Name != "s0" || all[2].Name != "s2" {
			t.Fatalf("list: %v %+v", err, all)
		}
		due, err := s.DueAlarms(ctx, now)
		if err != nil || len(due) != 1 || due[0].Name != "s0" {
			t.Fatalf("due alarms: %v %+v", err, due)
		}
		due, _ = s.DueAlarms(ctx, now.Add(2*time.Hour))
		if len(due) != 2 {
			t.Fatalf("due later: %+v", due)
		}
	})
	t.Run("JournalIdempotency", func(t *testing.T) {
		s := open(t)
		if err := s.Append(ctx, store.JournalEntry{Sandbox: "a", Op: "create", Key: "k1"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, store.JournalEntry{Sandbox: "a", Op: "create", Key: "k1"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("duplicate key: want already exists, got %v", err)
		}
		if err := s.Append(ctx, store.JournalEntry{Sandbox: "a", Op: "start"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, store.JournalEntry{Sandbox: "a", Op: "sleep"}); err != nil {
			t.Fatal(err)
		}
		j, err := s.Journal(ctx, "a")
		if err != nil || len(j) != 3 || j[0].Op != "create" || j[2].Op != "sleep" || j[1].Seq <= j[0].Seq {
			t.Fatalf("journal: %v %+v", err, j)
		}
	})
	t.Run("JournalAfter", func(t *testing.T) {
		s := open(t)
		if got, err := s.JournalAfter(ctx, 0, 10); err != nil || len(got) != 0 {
			t.Fatalf("empty journal: %v %+v", err, got)
		}
		// Two streams interleaved, one entry through Begin (an op record).
		for i, e := range []store.JournalEntry{
			{Sandbox: "a", Op: "create"}, {Sandbox: "b", Op: "create"}, {Sandbox: "a", Op: "start"},
			{Sandbox: "b", Op: "destroy"}, {Sandbox: "a", Op: "sleep"},
		} {
			if i == 2 {
				if _, err := s.Begin(ctx, store.JournalEntry{Sandbox: e.Sandbox, Op: e.Op, Status: store.OpDone, Finished: time.Now()}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := s.Append(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.JournalAfter(ctx, 0, 0)
		if err != nil || len(all) != 5 {
			t.Fatalf("all: %v %+v", err, all)
		}
		want := []string{"a/create", "b/create", "a/start", "b/destroy", "a/sleep"}
		for i, e := range all {
			if got := e.Sandbox + "/" + e.Op; got != want[i] {
				t.Fatalf("entry %d: %s, want %s (%+v)", i, got, want[i], all)
			}
			if i > 0 && e.Seq <= all[i-1].Seq {
				t.Fatalf("not oldest first: %+v", all)
			}
		}
		if all[2].Status != store.OpDone {
			t.Fatalf("Begin's status lost: %+v", all[2])
		}
		page, err := s.JournalAfter(ctx, all[1].Seq, 2)
		if err != nil || len(page) != 2 || page[0].Seq != all[2].Seq || page[1].Seq != all[3].Seq {
			t.Fatalf("page after %d: %v %+v", all[1].Seq, err, page)
		}
		if rest, err := s.JournalAfter(ctx, all[4].Seq, 10); err != nil || len(rest) != 0 {
			t.Fatalf("after the last: %v %+v", err, rest)
		}
	})
	t.Run("ConcurrentWriters", func(t *testing.T) {
		s := open(t)
		if _, err := s.Put(ctx, store.Sandbox{Name: "c", State: api.StateRunning}); err != nil {
			t.Fatal(err)
		}
		// 16 writers race to update version 1: exactly one may win.
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Put(ctx, store.Sandbox{Name: "c", State: api.StateSleeping, Version: 1}); err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				} else if !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Errorf("unexpected error: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("want exactly one winner, got %d", wins)
		}
	})
}

package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// runTakeover checks store.Takeover, TakeoverFrom and TakeoverSleeping against the
// store: both are conditional on the Version the caller read, so the
// store's optimistic check is what makes a move safe.
func runTakeover(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	put := func(t *testing.T, s store.Store, rec store.Sandbox) store.Sandbox {
		t.Helper()
		v, err := s.Put(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		rec.Version = v
		return rec
	}
	t.Run("Takeover/DeadOwner", func(t *testing.T) {
		s := open(t)
		before := put(t, s, store.Sandbox{Name: "a", ID: "id-a", State: api.StateRunning, IP: "10.0.0.2", HostUID: 100000, Owner: "n1", OwnerEpoch: 3})
		got, err := store.Takeover(ctx, s, "a", "n2")
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != "n2" || got.OwnerEpoch != 4 || got.State != api.StateSleeping || got.IP != "" || got.HostUID != 0 || got.Version != before.Version+1 {
			t.Fatalf("after takeover: %+v", got)
		}
		// The old owner's write, prepared before the takeover, fails.
		before.State = api.StateSleeping
		if _, err := s.Put(ctx, before); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("old owner's write after takeover: want failed precondition, got %v", err)
		}
		again, err := store.Takeover(ctx, s, "a", "n2")
		if err != nil || again.Version != got.Version {
			t.Fatalf("takeover by the owner: %+v %v, want it unchanged", again, err)
		}
	})
	t.Run("Takeover/From", func(t *testing.T) {
		s := open(t)
		read := put(t, s, store.Sandbox{Name: "a", ID: "id-a", State: api.StateRunning, IP: "10.0.0.2", Owner: "dead", OwnerEpoch: 2})
		got, err := store.TakeoverFrom(ctx, s, read, "dead", "n2")
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != "n2" || got.OwnerEpoch != 3 || got.State != api.StateSleeping || got.IP != "" {
			t.Fatalf("after the takeover: %+v", got)
		}
		// A second taker with the same read (it chose another node) loses.
		if _, err := store.TakeoverFrom(ctx, s, read, "dead", "n3"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("second takeover with the same read: want failed precondition, got %v", err)
		}
		// A fresh read that names the new owner is refused without a
		// write: the sandbox is no longer the dead node's to give away.
		fresh, err := s.Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.TakeoverFrom(ctx, s, fresh, "dead", "n3"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("takeover off a node that no longer owns it: want failed precondition, got %v", err)
		}
		if st, _ := s.Get(ctx, "a"); st.Owner != "n2" || st.Version != got.Version {
			t.Fatalf("a refused takeover wrote: %+v", st)
		}
		for _, c := range []struct{ from, to string }{{"", "n1"}, {"n2", ""}, {"n2", "n2"}} {
			if _, err := store.TakeoverFrom(ctx, s, fresh, c.from, c.to); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("takeover %q→%q: want invalid argument, got %v", c.from, c.to, err)
			}
		}
	})
	t.Run("Takeover/Sleeping", func(t *testing.T) {
		s := open(t)
		read := put(t, s, store.Sandbox{Name: "a", ID: "id-a", State: api.StateSleeping, Owner: "d", OwnerEpoch: 1, HostUID: 100000,
			Persist: api.PersistDisk, PersistSnapshot: "snap-1"})
		got, err := store.TakeoverSleeping(ctx, s, read, "d", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != "n1" || got.OwnerEpoch != 2 || got.State != api.StateSleeping || got.HostUID != 0 || got.PersistSnapshot != "snap-1" {
			t.Fatalf("after the move: %+v", got)
		}
		if st, _ := s.Get(ctx, "a"); st.Owner != "n1" || st.Version != got.Version {
			t.Fatalf("stored after the move: %+v", st)
		}
		// A second mover with the same read loses: exactly one wins.
		if _, err := store.TakeoverSleeping(ctx, s, read, "d", "n2"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("second move with the same read: want failed precondition, got %v", err)
		}
		if st, _ := s.Get(ctx, "a"); st.Owner != "n1" {
			t.Fatalf("the loser wrote: %+v", st)
		}
	})
	t.Run("Takeover/SleepingRefused", func(t *testing.T) {
		s := open(t)
		read := put(t, s, store.Sandbox{Name: "a", ID: "id-a", State: api.StateSleeping, Owner: "d", OwnerEpoch: 1})
		// It woke on its owner after the read: the stale read is refused.
		woke := read
		woke.State = api.StateRunning
		put(t, s, woke)
		if _, err := store.TakeoverSleeping(ctx, s, read, "d", "n1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("move of a sandbox that woke since the read: want failed precondition, got %v", err)
		}
		fresh, err := s.Get(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		// A fresh read of a running sandbox is refused without a write.
		if _, err := store.TakeoverSleeping(ctx, s, fresh, "d", "n1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("move of a running sandbox: want failed precondition, got %v", err)
		}
		// Owned by another node than the one it should leave.
		fresh.State = api.StateSleeping
		fresh = put(t, s, fresh)
		if _, err := store.TakeoverSleeping(ctx, s, fresh, "other", "n1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("move off a node that does not own it: want failed precondition, got %v", err)
		}
		if st, _ := s.Get(ctx, "a"); st.Owner != "d" || st.Version != fresh.Version {
			t.Fatalf("a refused move wrote: %+v", st)
		}
		for _, c := range []struct{ from, to string }{{"", "n1"}, {"d", ""}, {"d", "d"}} {
			if _, err := store.TakeoverSleeping(ctx, s, fresh, c.from, c.to); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("move %q→%q: want invalid argument, got %v", c.from, c.to, err)
			}
		}
		if _, err := store.TakeoverSleeping(ctx, s, store.Sandbox{Name: "a", State: api.StateSleeping, Owner: "d"}, "d", "n1"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("move of an unread record: want invalid argument, got %v", err)
		}
	})
}

package events

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

func TestMap(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		e    store.JournalEntry
		want string // "" = no event
	}{
		{store.JournalEntry{Op: "create", Detail: "s1"}, api.EventCreated},
		{store.JournalEntry{Op: "start", Detail: "s1 in 90ms"}, api.EventStarted},
		{store.JournalEntry{Op: "wake"}, api.EventWoke},
		{store.JournalEntry{Op: "sleep", Detail: "idle"}, api.EventSlept},
		{store.JournalEntry{Op: "snapshot", Detail: "snap_1"}, api.EventSnapshotted},
		{store.JournalEntry{Op: "fork", Detail: "2 from snap_1"}, api.EventForked},
		{store.JournalEntry{Op: "destroy"}, api.EventDestroyed},
		{store.JournalEntry{Op: "create-failed"}, api.EventFailed},
		{store.JournalEntry{Op: "start-failed"}, api.EventFailed},
		{store.JournalEntry{Op: "compute-lost"}, api.EventFailed},
		{store.JournalEntry{Op: "oom-killed"}, api.EventOOMKilled},
		{store.JournalEntry{Op: "reconcile", Detail: "compute lost while running"}, api.EventFailed},
		// Not events: internal steps, and the API's records of calls.
		{store.JournalEntry{Op: "reconcile", Detail: "something else"}, ""},
		{store.JournalEntry{Op: "expose-port", Detail: "8080"}, ""},
		{store.JournalEntry{Op: "adopt"}, ""},
		{store.JournalEntry{Op: "start-command-failed"}, ""}, // the sandbox runs
		{store.JournalEntry{Op: "exec", Detail: "POST /v1/sandboxes/a/exec"}, ""},
		{store.JournalEntry{Op: "destroy", Detail: "DELETE /v1/sandboxes/a"}, ""},
		{store.JournalEntry{Op: "create", Detail: "POST /v1/sandboxes body-sha256:00"}, ""},
	}
	for _, c := range cases {
		c.e.Seq, c.e.Sandbox, c.e.At = 7, "a", at
		ev, ok := Map(c.e)
		if c.want == "" {
			if ok {
				t.Errorf("%s %q: want no event, got %+v", c.e.Op, c.e.Detail, ev)
			}
			continue
		}
		if !ok || ev.Type != c.want || ev.ID != "7" || ev.Sandbox != "a" || !ev.At.Equal(at) || ev.Op != c.e.Op || ev.Detail != c.e.Detail {
			t.Errorf("%s: want %s, got %v %+v", c.e.Op, c.want, ok, ev)
		}
	}
	if _, ok := Map(store.JournalEntry{Seq: 1, Sandbox: "node:n1", Op: "create"}); ok {
		t.Error("a node stream's entry became an event")
	}
	ev, _ := Map(store.JournalEntry{Seq: 1, Sandbox: "a", Op: "create-failed", Status: store.OpFailed, Error: "no space"})
	if ev.Detail != "no space" {
		t.Errorf("failed op's error not in the detail: %+v", ev)
	}
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func appendAll(t *testing.T, st store.Store, es ...store.JournalEntry) {
	t.Helper()
	for _, e := range es {
		if err := st.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFeedOrderAndTenant(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	now := time.Now()
	if _, err := st.Put(ctx, store.Sandbox{Name: "a", Tenant: "acme", CreatedAt: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, store.Sandbox{Name: "b", CreatedAt: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	appendAll(t, st,
		store.JournalEntry{Sandbox: "a", Op: "create"},
		store.JournalEntry{Sandbox: "a", Op: "expose-port", Detail: "80"},
		store.JournalEntry{Sandbox: "b", Op: "create"},
		store.JournalEntry{Sandbox: "a", Op: "start"},
	)
	f := NewFeed(st)
	evs, next, err := f.After(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Type != api.EventCreated || evs[1].Sandbox != "b" || evs[2].Type != api.EventStarted {
		t.Fatalf("events: %+v", evs)
	}
	if evs[0].Tenant != "acme" || evs[1].Tenant != "" || evs[2].Tenant != "acme" {
		t.Fatalf("tenants: %+v", evs)
	}
	if head, _ := f.Head(ctx); next != head || next != 4 {
		t.Fatalf("next %d, head %d: want 4 (past the skipped entry too)", next, head)
	}
	if evs, n2, _ := f.After(ctx, next, 0); len(evs) != 0 || n2 != next {
		t.Fatalf("after the head: %d %+v", n2, evs)
	}

	// a is destroyed: its record goes, the feed still knows its tenant.
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	appendAll(t, st, store.JournalEntry{Sandbox: "a", Op: "destroy"})
	evs, next, _ = f.After(ctx, next, 0)
	if len(evs) != 1 || evs[0].Type != api.EventDestroyed || evs[0].Tenant != "acme" {
		t.Fatalf("destroy: %+v", evs)
	}
	// A new feed (a restarted daemon) never saw a's record: no tenant,
	// rather than a guess.
	evs, _, _ = NewFeed(st).After(ctx, next-1, 0)
	if len(evs) != 1 || evs[0].Tenant != "" {
		t.Fatalf("destroy seen by a fresh feed: %+v", evs)
	}
	// A later sandbox of the same name, another tenant's: the old
	// entries are not given its tenant.
	if _, err := st.Put(ctx, store.Sandbox{Name: "a", Tenant: "other", CreatedAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	evs, _, _ = NewFeed(st).After(ctx, 0, 0)
	for _, ev := range evs {
		if ev.Sandbox == "a" && ev.Tenant == "other" {
			t.Fatalf("an old entry got the later sandbox's tenant: %+v", ev)
		}
	}
}

// fakeSource serves a fixed journal (holes included).
type fakeSource struct{ ents []store.JournalEntry }

func (f *fakeSource) JournalAfter(_ context.Context, after int64, limit int) ([]store.JournalEntry, error) {
	var out []store.JournalEntry
	for _, e := range f.ents {
		if e.Seq > after && len(out) < limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (f *fakeSource) Get(context.Context, string) (store.Sandbox, error) { return store.Sandbox{}, nil }

func TestFeedWaitsForHole(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := &fakeSource{ents: []store.JournalEntry{
		{Seq: 1, Sandbox: "a", Op: "create", At: now},
		{Seq: 3, Sandbox: "a", Op: "start", At: now}, // 2 not committed yet
	}}
	f := NewFeed(src)
	f.Now = func() time.Time { return now.Add(time.Second) }
	evs, next, _ := f.After(context.Background(), 0, 0)
	if len(evs) != 1 || next != 1 {
		t.Fatalf("before the hole: next %d %+v", next, evs)
	}
	// Seq 2 commits late: it is read, in order.
	src.ents = append(src.ents[:1], append([]store.JournalEntry{{Seq: 2, Sandbox: "a", Op: "sleep", At: now}}, src.ents[1:]...)...)
	evs, next, _ = f.After(context.Background(), 1, 0)
	if len(evs) != 2 || evs[0].Op != "sleep" || next != 3 {
		t.Fatalf("filled hole: next %d %+v", next, evs)
	}
	// A hole that never fills is passed once older than GapGrace.
	src.ents = append(src.ents, store.JournalEntry{Seq: 5, Sandbox: "a", Op: "destroy", At: now})
	if evs, next, _ = f.After(context.Background(), 3, 0); len(evs) != 0 || next != 3 {
		t.Fatalf("young hole: next %d %+v", next, evs)
	}
	f.Now = func() time.Time { return now.Add(DefaultGapGrace + time.Second) }
	if evs, next, _ = f.After(context.Background(), 3, 0); len(evs) != 1 || next != 5 {
		t.Fatalf("old hole: next %d %+v", next, evs)
	}
}

package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/events"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

type lifecycleSSE struct {
	id, name string
	ev       api.Event
}

// openEvents opens GET path with key and returns the events as they
// arrive; the stream is closed at the test's end.
func openEvents(t *testing.T, ts *httptest.Server, path, key string, hdr ...string) <-chan lifecycleSSE {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		cancel()
		t.Fatalf("GET %s: %s %s", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	out := make(chan lifecycleSSE, 100)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var cur lifecycleSSE
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &cur.ev)
			case line == "" && cur.name != "":
				out <- cur
				cur = lifecycleSSE{}
			}
		}
	}()
	return out
}

// next waits (with a deadline, not a timing assertion) for n events.
func nextEvents(t *testing.T, c <-chan lifecycleSSE, n int) []lifecycleSSE {
	t.Helper()
	var got []lifecycleSSE
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case e, ok := <-c:
			if !ok {
				t.Fatalf("stream ended after %d events: %+v", len(got), got)
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("timed out after %d of %d events: %+v", len(got), n, got)
		}
	}
	return got
}

func eventsServer(t *testing.T) (*httptest.Server, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := newServer(newFake(), Options{APIKey: testKey, Logf: t.Logf, Events: events.NewFeed(st), Tenants: func(k string) (string, bool) {
		switch k {
		case "acme-key-0123456789":
			return "acme", true
		case "umbrella-key-0123456789":
			return "umbrella", true
		}
		return "", false
	}})
	s.eventPoll = 5 * time.Millisecond
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, st
}

func journal(t *testing.T, st store.Store, es ...store.JournalEntry) {
	t.Helper()
	for _, e := range es {
		if err := st.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEventsStreamOrderAndResume(t *testing.T) {
	ts, st := eventsServer(t)
	journal(t, st, store.JournalEntry{Sandbox: "old", Op: "create"}) // seq 1
	live := openEvents(t, ts, "/v1/events", testKey)                 // from the head: not seq 1
	journal(t, st,
		store.JournalEntry{Sandbox: "a", Op: "create"},                    // 2
		store.JournalEntry{Sandbox: "a", Op: "start"},                     // 3
		store.JournalEntry{Sandbox: "a", Op: "expose-port", Detail: "80"}, // 4: no event
		store.JournalEntry{Sandbox: "a", Op: "sleep", Detail: "idle"},     // 5
		store.JournalEntry{Sandbox: "a", Op: "wake"},                      // 6
		store.JournalEntry{Sandbox: "a", Op: "destroy"},                   // 7
	)
	got := nextEvents(t, live, 5)
	want := []string{"2 sandbox.created", "3 sandbox.started", "5 sandbox.slept", "6 sandbox.woke", "7 sandbox.destroyed"}
	for i, e := range got {
		if e.id+" "+e.name != want[i] || e.ev.ID != e.id || e.ev.Type != e.name || e.ev.Sandbox != "a" {
			t.Fatalf("event %d: %+v, want %s", i, e, want[i])
		}
	}
	// A reconnect with Last-Event-ID gets only what came after it.
	resumed := openEvents(t, ts, "/v1/events", testKey, "Last-Event-ID", "5")
	got = nextEvents(t, resumed, 2)
	if got[0].id != "6" || got[1].id != "7" {
		t.Fatalf("after Last-Event-ID 5: %+v", got)
	}
	// ?after=0 replays everything still in the journal, the first too.
	all := nextEvents(t, openEvents(t, ts, "/v1/events?after=0", testKey), 6)
	if all[0].id != "1" || all[0].ev.Sandbox != "old" || all[5].id != "7" {
		t.Fatalf("after=0: %+v", all)
	}
	// Nothing is sent twice: the next event on the resumed stream is
	// the next entry, not a repeat.
	journal(t, st, store.JournalEntry{Sandbox: "b", Op: "create"})
	if e := nextEvents(t, resumed, 1)[0]; e.id != "8" || e.ev.Sandbox != "b" {
		t.Fatalf("after the resume: %+v", e)
	}
	if r := do(t, ts, http.MethodGet, "/v1/events?after=x", nil); r.status != http.StatusBadRequest {
		t.Fatalf("after=x: %d %s", r.status, r.body)
	}
}

func TestEventsTenantScope(t *testing.T) {
	ts, st := eventsServer(t)
	ctx := context.Background()
	for name, tenant := range map[string]string{"acme-1": "acme", "umb-1": "umbrella", "ops-1": ""} {
		if _, err := st.Put(ctx, store.Sandbox{Name: name, Tenant: tenant, CreatedAt: time.Now().Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	acme := openEvents(t, ts, "/v1/events?after=0", "acme-key-0123456789")
	umb := openEvents(t, ts, "/v1/events?after=0", "umbrella-key-0123456789")
	ops := openEvents(t, ts, "/v1/events?after=0", testKey)
	journal(t, st,
		store.JournalEntry{Sandbox: "umb-1", Op: "create"},
		store.JournalEntry{Sandbox: "ops-1", Op: "create"},
		store.JournalEntry{Sandbox: "acme-1", Op: "create"},
		store.JournalEntry{Sandbox: "acme-1", Op: "destroy"},
	)
	// The operator sees all four (the negative control: the tenants'
	// streams would carry the others' events if the filter were absent).
	if got := nextEvents(t, ops, 4); got[0].ev.Sandbox != "umb-1" || got[1].ev.Sandbox != "ops-1" {
		t.Fatalf("operator: %+v", got)
	}
	// acme's first two events are its own: umb-1's and ops-1's came
	// before them in the journal and were skipped.
	got := nextEvents(t, acme, 2)
	for _, e := range got {
		if e.ev.Sandbox != "acme-1" || e.ev.Tenant != "acme" {
			t.Fatalf("acme saw %+v", e)
		}
	}
	if e := nextEvents(t, umb, 1)[0]; e.ev.Sandbox != "umb-1" || e.ev.Tenant != "umbrella" {
		t.Fatalf("umbrella saw %+v", e)
	}
	// umbrella's stream has nothing else: a marker event of its own comes
	// next, not acme's or the operator's.
	journal(t, st, store.JournalEntry{Sandbox: "umb-1", Op: "destroy"})
	if e := nextEvents(t, umb, 1)[0]; e.ev.Sandbox != "umb-1" || e.name != api.EventDestroyed {
		t.Fatalf("umbrella's next event: %+v", e)
	}
	// ?sandbox= narrows further.
	one := nextEvents(t, openEvents(t, ts, "/v1/events?after=0&sandbox=ops-1", testKey), 1)
	if one[0].ev.Sandbox != "ops-1" {
		t.Fatalf("sandbox filter: %+v", one)
	}
}

func TestEventsWithoutFeed(t *testing.T) {
	ts := newTestServer(t, newFake(), nil)
	if r := do(t, ts, http.MethodGet, "/v1/events", nil); r.status != http.StatusConflict {
		t.Fatalf("no feed: %d %s", r.status, r.body)
	}
}

func TestEventsStreamEndsWhenFeedStops(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	feed := events.NewFeed(st)
	s := newServer(newFake(), Options{APIKey: testKey, Logf: t.Logf, Events: feed})
	s.eventPoll = 5 * time.Millisecond
	ts := httptest.NewServer(s)
	defer ts.Close()
	c := openEvents(t, ts, "/v1/events", testKey)
	feed.Stop()
	select {
	case _, ok := <-c:
		if ok {
			t.Fatal("an event after Stop")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after the feed stopped")
	}
}

package events

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

func TestSignVerify(t *testing.T) {
	secret, body := []byte("s3cret-s3cret"), []byte(`{"id":"1"}`)
	now := time.Unix(1_800_000_000, 0)
	h := Sign(secret, now, body)
	if err := Verify(secret, h, body, now, 0); err != nil {
		t.Fatalf("valid signature refused: %v", err)
	}
	for name, c := range map[string]struct {
		secret []byte
		header string
		body   []byte
		at     time.Time
	}{
		"wrong secret":  {[]byte("another-secret"), h, body, now},
		"changed body":  {secret, h, []byte(`{"id":"2"}`), now},
		"too old":       {secret, h, body, now.Add(DefaultTolerance + time.Second)},
		"no signature":  {secret, "t=1800000000", body, now},
		"garbage":       {secret, "v1=zz", body, now},
		"empty header":  {secret, "", body, now},
		"timestamp off": {secret, "t=1800000001" + h[len("t=1800000000"):], body, now},
	} {
		if err := Verify(c.secret, c.header, c.body, c.at, 0); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("%s: want unauthenticated, got %v", name, err)
		}
	}
}

func TestValidateURL(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:9/hook", "https://hooks.example.com/berth?x=1"} {
		if err := ValidateURL(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"", "ftp://example.com/", "file:///etc/passwd", "example.com/hook", "http:///nohost", "https://user:pw@example.com/", "http://example.com/#x", "javascript:alert(1)"} {
		if err := ValidateURL(u); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: want invalid argument, got %v", u, err)
		}
	}
}

// receiver answers 500 to the first fails attempts of each event, then
// records what it got (as a receiver would: verified, deduped by id).
type receiver struct {
	mu      sync.Mutex
	secret  []byte
	fails   int
	tries   map[string]int
	got     []api.Event
	badSigs int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	id := r.Header.Get(HeaderID)
	rc.tries[id]++
	if rc.tries[id] <= rc.fails {
		http.Error(w, "not now", http.StatusInternalServerError)
		return
	}
	if err := Verify(rc.secret, r.Header.Get(HeaderSignature), body, time.Now(), 0); err != nil {
		rc.badSigs++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev api.Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != id || ev.Type != r.Header.Get(HeaderType) {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	for _, g := range rc.got {
		if g.ID == id {
			return // a redelivery: already have it
		}
	}
	rc.got = append(rc.got, ev)
}

func (rc *receiver) snapshot() ([]api.Event, map[string]int, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	tries := map[string]int{}
	for k, v := range rc.tries {
		tries[k] = v
	}
	return append([]api.Event(nil), rc.got...), tries, rc.badSigs
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startHook(t *testing.T, h *Webhook) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	return func() { cancel(); <-done }
}

func TestWebhookRetriesAndSigns(t *testing.T) {
	st := openStore(t)
	appendAll(t, st, store.JournalEntry{Sandbox: "old", Op: "create"}) // before the webhook: not sent
	secret := []byte("webhook-secret-1")
	rc := &receiver{secret: secret, fails: 2, tries: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	cursor := filepath.Join(t.TempDir(), "hooks", "h1.cursor")
	hook := &Webhook{URL: srv.URL + "/hook", Secret: secret, Feed: NewFeed(st), CursorFile: cursor,
		Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Tries: 5, Poll: 5 * time.Millisecond, Logf: t.Logf}
	stop := startHook(t, hook)
	waitFor(t, "the cursor file", func() bool { _, err := os.Stat(cursor); return err == nil })
	appendAll(t, st,
		store.JournalEntry{Sandbox: "a", Op: "create", Detail: "s1"},
		store.JournalEntry{Sandbox: "a", Op: "expose-port", Detail: "80"},
		store.JournalEntry{Sandbox: "a", Op: "start", Detail: "s1 in 1ms"},
	)
	waitFor(t, "two events", func() bool { got, _, _ := rc.snapshot(); return len(got) == 2 })
	got, tries, bad := rc.snapshot()
	if got[0].Type != api.EventCreated || got[1].Type != api.EventStarted || got[0].Sandbox != "a" {
		t.Fatalf("events, in order: %+v", got)
	}
	if tries[got[0].ID] != 3 || tries[got[1].ID] != 3 || bad != 0 {
		t.Fatalf("want each event on its third try with a valid signature: tries %v, bad signatures %d", tries, bad)
	}
	for id := range tries {
		if id == "1" {
			t.Fatalf("the entry from before the webhook was configured was sent: %v", tries)
		}
	}

	// A restart resumes after the cursor: nothing delivered again, the
	// next event is. (Stopped once the cursor is written: a stop between
	// the receiver's 2xx and the cursor write would send the event again,
	// which is at least once, not what this checks.)
	waitFor(t, "the cursor at the last event", func() bool {
		b, _ := os.ReadFile(cursor)
		return string(b) == got[1].ID+"\n"
	})
	stop()
	appendAll(t, st, store.JournalEntry{Sandbox: "a", Op: "destroy"})
	rc.mu.Lock()
	rc.fails = 0
	rc.mu.Unlock()
	stop = startHook(t, hook)
	defer stop()
	waitFor(t, "the event after the restart", func() bool { got, _, _ := rc.snapshot(); return len(got) == 3 })
	got, tries, _ = rc.snapshot()
	if got[2].Type != api.EventDestroyed || tries[got[0].ID] != 3 || tries[got[1].ID] != 3 || tries[got[2].ID] != 1 {
		t.Fatalf("after restart: %+v tries %v", got, tries)
	}
}

// The negative control: the receiver's check refuses a delivery signed
// with another secret, so the test above can fail.
func TestWebhookWrongSecretRefused(t *testing.T) {
	st := openStore(t)
	rc := &receiver{secret: []byte("the-receivers-secret"), tries: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	cursor := filepath.Join(t.TempDir(), "h.cursor")
	if err := os.WriteFile(cursor, []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendAll(t, st, store.JournalEntry{Sandbox: "a", Op: "create"})
	hook := &Webhook{URL: srv.URL, Secret: []byte("not-the-same-secret"), Feed: NewFeed(st), CursorFile: cursor,
		Backoff: time.Millisecond, MaxBackoff: time.Millisecond, Tries: 3, Poll: 5 * time.Millisecond, Logf: t.Logf}
	stop := startHook(t, hook)
	defer stop()
	waitFor(t, "three refused tries", func() bool { _, _, bad := rc.snapshot(); return bad == 3 })
	if got, _, _ := rc.snapshot(); len(got) != 0 {
		t.Fatalf("a wrongly signed event was accepted: %+v", got)
	}
	// After its bounded tries the event is dropped and the cursor moves.
	waitFor(t, "the cursor past the dropped event", func() bool {
		b, _ := os.ReadFile(cursor)
		return string(b) == "1\n"
	})
}

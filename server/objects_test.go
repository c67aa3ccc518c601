package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/store/sqlite"
)

type counter struct{ st *durable.State }

func (c *counter) Add(ctx context.Context, a struct{ N int }) (int, error) {
	var n int
	if _, err := c.st.Storage.Get(ctx, "n", &n); err != nil {
		return 0, err
	}
	n += a.N
	return n, c.st.Storage.Put(ctx, "n", n)
}

func (c *counter) Ping(ctx context.Context) (string, error) { return "pong", nil }

// objectServer is a server with a real durable host and journal on a
// SQLite store at path (reopening path is a daemon restart).
func objectServer(t testing.TB, f *fakeBackend, path string) *httptest.Server {
	return objectServerJ(t, f, path, true)
}

func objectServerJ(t testing.TB, f *fakeBackend, path string, journal bool) *httptest.Server {
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	h := durable.NewHost(durable.Config{Store: st})
	if err := h.Register("Counter", (*counter)(nil), func(s *durable.State) (any, error) { return &counter{st: s}, nil }); err != nil {
		t.Fatal(err)
	}
	opts := Options{APIKey: testKey, Objects: h, Journal: st, Logf: t.Logf}
	if !journal {
		opts.Journal = nil
	}
	ts := httptest.NewServer(newServer(f, opts))
	t.Cleanup(func() { ts.Close(); st.Close() })
	return ts
}

func TestObjectRPC(t *testing.T) {
	ts := objectServer(t, newFake(), filepath.Join(t.TempDir(), "state.db"))
	r := do(t, ts, "POST", "/v1/objects/Counter/a/Add", strings.NewReader(`{"N":2}`))
	if r.status != 200 || strings.TrimSpace(string(r.body)) != "2" {
		t.Fatalf("Add: %d %s", r.status, r.body)
	}
	r = do(t, ts, "POST", "/v1/objects/Counter/a/Ping", nil)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `"pong"` {
		t.Fatalf("Ping: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/objects/Nope/a/Add", `{}`, 404, "not_found"},
		{"/v1/objects/Counter/a/Nope", `{}`, 404, "not_found"},
		{"/v1/objects/Counter/a/Add", `{"N":"x"}`, 400, "invalid_argument"},
		{"/v1/objects/Counter/a/Add", `not json`, 400, "invalid_argument"},
		{"/v1/objects/Counter/a/Ping", `{"x":1}`, 400, "invalid_argument"},
	} {
		r := do(t, ts, "POST", c.path, strings.NewReader(c.body))
		if r.status != c.status || r.apiError(t).Code != c.code {
			t.Errorf("POST %s %s: %d %s, want %d %s", c.path, c.body, r.status, r.body, c.status, c.code)
		}
	}
	if r := do(t, ts, "POST", "/v1/objects/Counter/a/Add", strings.NewReader(`{"N":1}`), "Authorization", "Bearer wrong"); r.status != 401 {
		t.Fatalf("wrong key: %d", r.status)
	}
}

// TestObjectRPCConcurrent is issue test 3 over HTTP: 100 concurrent RPCs
// to one object end at exactly 100.
func TestObjectRPCConcurrent(t *testing.T) {
	ts := objectServer(t, newFake(), filepath.Join(t.TempDir(), "state.db"))
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := do(t, ts, "POST", "/v1/objects/Counter/c/Add", strings.NewReader(`{"N":1}`)); r.status != 200 {
				t.Errorf("Add: %d %s", r.status, r.body)
			}
		}()
	}
	wg.Wait()
	if r := do(t, ts, "POST", "/v1/objects/Counter/c/Add", strings.NewReader(`{"N":0}`)); strings.TrimSpace(string(r.body)) != "100" {
		t.Fatalf("counter after 100 concurrent calls: %s", r.body)
	}
}

// TestIdempotentRetryAcrossRestart is issue test 5 at the API layer: a
// retried create and a retried RPC with the same Idempotency-Key, after
// the store is closed and reopened, return the first answer and do not
// repeat the effect.
func TestIdempotentRetryAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	f := newFake()
	ts := objectServer(t, f, path)
	create := `{"name":"idem","env":{"API_TOKEN":"s3cret"}}`
	r1 := do(t, ts, "POST", "/v1/sandboxes", strings.NewReader(create), "Idempotency-Key", "k-create")
	if r1.status != 201 {
		t.Fatalf("create: %d %s", r1.status, r1.body)
	}
	rpc1 := do(t, ts, "POST", "/v1/objects/Counter/i/Add", strings.NewReader(`{"N":5}`), "Idempotency-Key", "k-add")
	if strings.TrimSpace(string(rpc1.body)) != "5" {
		t.Fatalf("first add: %s", rpc1.body)
	}
	calls := f.calls.Load()
	ts.Close()

	ts = objectServer(t, f, path) // the daemon restarted
	r2 := do(t, ts, "POST", "/v1/sandboxes", strings.NewReader(create), "Idempotency-Key", "k-create")
	if r2.status != 201 || string(r2.body) != string(r1.body) || r2.header.Get(api.IdempotentReplayHeader) != "true" {
		t.Fatalf("retried create: %d %q replay=%q, want the first answer %q", r2.status, r2.body, r2.header.Get(api.IdempotentReplayHeader), r1.body)
	}
	if f.calls.Load() != calls {
		t.Fatal("the retried create reached the backend")
	}
	rpc2 := do(t, ts, "POST", "/v1/objects/Counter/i/Add", strings.NewReader(`{"N":5}`), "Idempotency-Key", "k-add")
	if strings.TrimSpace(string(rpc2.body)) != "5" {
		t.Fatalf("retried add answered %s, want the first answer 5", rpc2.body)
	}
	// Control: without the key the effect does repeat.
	if r := do(t, ts, "POST", "/v1/objects/Counter/i/Add", strings.NewReader(`{"N":5}`)); strings.TrimSpace(string(r.body)) != "10" {
		t.Fatalf("unkeyed add: %s", r.body)
	}
	// The same key for a different request is refused.
	if r := do(t, ts, "POST", "/v1/objects/Counter/i/Add", strings.NewReader(`{"N":7}`), "Idempotency-Key", "k-add"); r.status != 400 {
		t.Fatalf("reused key, other body: %d %s", r.status, r.body)
	}
	// The journal shows the create once, with its secret redacted.
	r := do(t, ts, "GET", "/v1/sandboxes/idem/journal", nil)
	var j []api.JournalEntry
	if err := json.Unmarshal(r.body, &j); err != nil || r.status != 200 {
		t.Fatalf("journal: %d %s", r.status, r.body)
	}
	if len(j) != 1 || j[0].Op != "create" || j[0].Status != "done" || j[0].Key == "" || j[0].FinishedAt == nil {
		t.Fatalf("journal: %+v", j)
	}
	if strings.Contains(string(j[0].Args), "s3cret") || !strings.Contains(string(j[0].Args), "API_TOKEN") {
		t.Fatalf("journal args not redacted: %s", j[0].Args)
	}
}

// BenchmarkObjectRPC measures the HTTP round trip to an idle object (a
// no-op method), journaled as the daemon does, and reports the p50.
func BenchmarkObjectRPC(b *testing.B) { benchRPC(b, true) }

// BenchmarkObjectRPCNoJournal is the same without the journal, to show
// what recording each call costs.
func BenchmarkObjectRPCNoJournal(b *testing.B) { benchRPC(b, false) }

func benchRPC(b *testing.B, journal bool) {
	ts := objectServerJ(b, newFake(), filepath.Join(b.TempDir(), "state.db"), journal)
	c := ts.Client()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptestRequest(ts.URL + "/v1/objects/Counter/bench/Ping")
		t0 := time.Now()
		res, err := c.Do(req)
		if err != nil || res.StatusCode != 200 {
			b.Fatal(err, res)
		}
		res.Body.Close()
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}

func httptestRequest(url string) *http.Request {
	req, _ := http.NewRequest("POST", url, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	return req
}

// TestIdempotentConcurrentRetries: 20 concurrent calls with one key run
// the effect once; the others get the first answer or a 409 (still
// running), never a second effect.
func TestIdempotentConcurrentRetries(t *testing.T) {
	ts := objectServer(t, newFake(), filepath.Join(t.TempDir(), "state.db"))
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := do(t, ts, "POST", "/v1/objects/Counter/k/Add", strings.NewReader(`{"N":1}`), "Idempotency-Key", "same")
			if r.status != 200 && r.status != 409 {
				t.Errorf("keyed call: %d %s", r.status, r.body)
			}
			if r.status == 200 && strings.TrimSpace(string(r.body)) != "1" {
				t.Errorf("keyed call answered %s, want the first answer 1", r.body)
			}
		}()
	}
	wg.Wait()
	if r := do(t, ts, "POST", "/v1/objects/Counter/k/Add", strings.NewReader(`{"N":0}`)); strings.TrimSpace(string(r.body)) != "1" {
		t.Fatalf("counter after 20 keyed calls: %s, want 1", r.body)
	}
}

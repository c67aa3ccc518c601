package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

type fakeUsage struct {
	mu      sync.Mutex
	tenants []string
}

func (f *fakeUsage) Metrics(name string) (api.SandboxMetrics, bool) {
	return api.SandboxMetrics{Name: name, IntervalMs: 5000, Current: &api.UsageSample{CPUSeconds: 1.5}, History: []api.UsageSample{{CPUSeconds: 1.5}}}, true
}

func (f *fakeUsage) Usage(_ context.Context, tenant string, from, to time.Time) (api.UsageReport, error) {
	f.mu.Lock()
	f.tenants = append(f.tenants, tenant)
	f.mu.Unlock()
	return api.UsageReport{From: from, To: to, Records: []api.UsageRecord{{Tenant: tenant, CPUSeconds: 2}}}, nil
}

func TestSandboxMetricsRoute(t *testing.T) {
	f := newFake()
	f.boxes["s1"] = api.Sandbox{Name: "s1", State: api.StateRunning}
	ts := newTestServer(t, f, func(s *server) { s.opts.Usage = &fakeUsage{} })
	r := do(t, ts, http.MethodGet, "/v1/sandboxes/s1/metrics", nil)
	var m api.SandboxMetrics
	if r.status != http.StatusOK || json.Unmarshal(r.body, &m) != nil || m.Current == nil || m.Current.CPUSeconds != 1.5 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	if r := do(t, ts, http.MethodGet, "/v1/sandboxes/nope/metrics", nil); r.status != http.StatusNotFound {
		t.Errorf("metrics of a missing sandbox: %d", r.status)
	}
	// Without a sampler: failed precondition (409), not an empty success.
	ts2 := newTestServer(t, f, nil)
	if r := do(t, ts2, http.MethodGet, "/v1/sandboxes/s1/metrics", nil); r.status != http.StatusConflict {
		t.Errorf("metrics without sampler: %d %s", r.status, r.body)
	}
}

func TestUsageRouteTenantScope(t *testing.T) {
	fu := &fakeUsage{}
	s := newServer(newFake(), Options{APIKey: testKey, Usage: fu, Tenants: func(k string) (string, bool) {
		if k == "acme-key-0123456789" {
			return "acme", true
		}
		return "", false
	}})
	ts := httptest.NewServer(s)
	defer ts.Close()
	// The operator names any tenant.
	if r := do(t, ts, http.MethodGet, "/v1/usage?tenant=globex&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", nil); r.status != http.StatusOK {
		t.Fatalf("operator: %d %s", r.status, r.body)
	}
	// A tenant reads its own (named or not) ...
	for _, q := range []string{"", "?tenant=acme"} {
		if r := do(t, ts, http.MethodGet, "/v1/usage"+q, nil, "Authorization", "Bearer acme-key-0123456789"); r.status != http.StatusOK {
			t.Fatalf("tenant own %q: %d %s", q, r.status, r.body)
		}
	}
	// ... and never another's.
	r := do(t, ts, http.MethodGet, "/v1/usage?tenant=globex", nil, "Authorization", "Bearer acme-key-0123456789")
	if r.status != http.StatusForbidden {
		t.Errorf("tenant reading another's usage: %d %s", r.status, r.body)
	}
	fu.mu.Lock()
	got := strings.Join(fu.tenants, ",")
	fu.mu.Unlock()
	if got != "globex,acme,acme" {
		t.Errorf("usage asked for %q, want globex,acme,acme", got)
	}
	for _, q := range []string{"?from=yesterday", "?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "?from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z"} {
		if r := do(t, ts, http.MethodGet, "/v1/usage"+q, nil); r.status != http.StatusBadRequest {
			t.Errorf("bad range %q: %d", q, r.status)
		}
	}
}

// TestGuardObserveRouteLabel: the API latency metric is labelled by the
// route pattern, never by the raw path (no series per sandbox name).
func TestGuardObserveRouteLabel(t *testing.T) {
	f := newFake()
	f.boxes["secret-name-1"] = api.Sandbox{Name: "secret-name-1", State: api.StateRunning}
	var mu sync.Mutex
	var routes []string
	h := Guard(newServer(f, Options{APIKey: testKey, Usage: &fakeUsage{}}), GuardOptions{Observe: func(route string, status int, d time.Duration) {
		mu.Lock()
		routes = append(routes, route+" "+http.StatusText(status))
		mu.Unlock()
	}})
	ts := httptest.NewServer(h)
	defer ts.Close()
	do(t, ts, http.MethodGet, "/v1/sandboxes/secret-name-1", nil)
	do(t, ts, http.MethodGet, "/v1/sandboxes/secret-name-1/metrics", nil)
	do(t, ts, http.MethodGet, "/v1/nope/secret-name-1", nil)
	do(t, ts, http.MethodGet, "/sandboxes/secret-name-1", nil) // the E2B face's shape
	mu.Lock()
	defer mu.Unlock()
	want := []string{"GET /v1/sandboxes/{name} OK", "GET /v1/sandboxes/{name}/metrics OK", "unrouted Not Found", "e2b Not Found"}
	if strings.Join(routes, "|") != strings.Join(want, "|") {
		t.Errorf("route labels %q, want %q", routes, want)
	}
	for _, r := range routes {
		if strings.Contains(r, "secret-name-1") {
			t.Errorf("a sandbox name became a label value: %q", r)
		}
	}
}

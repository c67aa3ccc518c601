package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/metrics"
)

const token = "0123456789abcdef-metrics"

func scrape(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func parse(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	return fams
}

// value is the sample of fam whose labels include want.
func value(fams map[string]*dto.MetricFamily, fam string, want map[string]string) (float64, bool) {
	f := fams[fam]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestHandlerAuth(t *testing.T) {
	reg := metrics.New(metrics.Sources{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	withToken := httptest.NewServer(metrics.Mount(next, reg.Handler(token)))
	defer withToken.Close()
	noToken := httptest.NewServer(metrics.Mount(next, reg.Handler("")))
	defer noToken.Close()

	// Negative control first: the right token is served.
	if code, body := scrape(t, withToken.URL+metrics.Path, token); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("with the token: %d %q", code, body)
	}
	for _, c := range []struct{ name, url, bearer string }{
		{"no header", withToken.URL + metrics.Path, ""},
		{"wrong token", withToken.URL + metrics.Path, token + "x"},
		{"prefix of the token", withToken.URL + metrics.Path, token[:8]},
		{"no token configured", noToken.URL + metrics.Path, ""},
		{"no token configured, any bearer", noToken.URL + metrics.Path, "anything"},
	} {
		code, body := scrape(t, c.url, c.bearer)
		if code != http.StatusUnauthorized || strings.Contains(body, "go_goroutines") {
			t.Errorf("%s: %d %q, want 401 without metrics", c.name, code, body)
		}
	}
	// Other paths pass through.
	if code, _ := scrape(t, withToken.URL+"/v1/health", ""); code != http.StatusTeapot {
		t.Errorf("other path: %d", code)
	}
	// The separate listener's handler is open.
	open := httptest.NewServer(reg.Open())
	defer open.Close()
	if code, _ := scrape(t, open.URL, ""); code != http.StatusOK {
		t.Errorf("open handler: %d", code)
	}
}

func TestCountersMoveAndParse(t *testing.T) {
	reg := metrics.New(metrics.Sources{
		Sandboxes: func(context.Context) map[string]int { return map[string]int{api.StateRunning: 3, api.StateSleeping: 1} },
		Pools: func() []api.Pool {
			return []api.Pool{{Image: "debian-trixie", Isolation: "runc", Size: 4, Ready: 2, Starting: 1, Claims: 7}}
		},
		QueueDepth:    func() int { return 5 },
		SnapshotBytes: func(context.Context) int64 { return 1 << 20 },
	})
	srv := httptest.NewServer(reg.Open())
	defer srv.Close()
	_, before := scrape(t, srv.URL, "")
	fb := parse(t, before)
	if v, ok := value(fb, "berth_agent_deaths_total", nil); !ok || v != 0 {
		t.Fatalf("agent deaths before: %v %v", v, ok)
	}
	reg.ObserveRequest("POST /v1/sandboxes/{name}/exec", 200, 3*time.Millisecond)
	reg.ObserveRequest("POST /v1/sandboxes/{name}/exec", 200, 5*time.Millisecond)
	reg.StartDone(metrics.PathCold, 900*time.Millisecond)
	reg.StartDone(metrics.PathPool, 20*time.Millisecond)
	reg.AgentDied()
	reg.Repaired("orphan-container")
	reg.Egress(true, 100, 5000)
	reg.Egress(false, 0, 0)
	_, after := scrape(t, srv.URL, "")
	fa := parse(t, after)
	for _, c := range []struct {
		fam    string
		labels map[string]string
		want   float64
	}{
		{"berth_api_request_duration_seconds", map[string]string{"route": "POST /v1/sandboxes/{name}/exec", "code": "200"}, 2},
		{"berth_sandbox_start_duration_seconds", map[string]string{"path": "cold"}, 1},
		{"berth_sandbox_start_duration_seconds", map[string]string{"path": "pool"}, 1},
		{"berth_agent_deaths_total", nil, 1},
		{"berth_reconcile_repairs_total", map[string]string{"kind": "orphan-container"}, 1},
		{"berth_egress_connections_total", map[string]string{"verdict": "allowed"}, 1},
		{"berth_egress_connections_total", map[string]string{"verdict": "denied"}, 1},
		{"berth_egress_bytes_total", map[string]string{"verdict": "allowed", "direction": "in"}, 5000},
		{"berth_egress_bytes_total", map[string]string{"verdict": "allowed", "direction": "out"}, 100},
		{"berth_sandboxes", map[string]string{"state": "running"}, 3},
		{"berth_sandboxes", map[string]string{"state": "failed"}, 0},
		{"berth_pool_ready", map[string]string{"pool": "debian-trixie/runc"}, 2},
		{"berth_pool_claims_total", map[string]string{"pool": "debian-trixie/runc"}, 7},
		{"berth_admission_queue_depth", nil, 5},
		{"berth_snapshot_bytes", nil, 1 << 20},
	} {
		if v, ok := value(fa, c.fam, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.fam, c.labels, v, ok, c.want)
		}
	}
}

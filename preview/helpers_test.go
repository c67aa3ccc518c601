package preview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/preview"
)

// deadline bounds every wait so a broken proxy fails a test rather than
// hanging it; generous so that slow machines never flake.
const deadline = 20 * time.Second

const testKey = "berth-test-api-key"

// fakeResolver plays the controller: exposures by sandbox and port, each
// dialing a real local listener that stands in for the sandbox's service.
type fakeResolver struct {
	mu      sync.Mutex
	exps    map[string]*fakeExp
	lookups int
	dials   int // how many tunnels were opened ("the sandbox was touched")
}

type fakeExp struct {
	exp      preview.Exposure
	upstream string // host:port
	stale    bool
	dial     preview.DialFunc // overrides upstream when set
}

func key(sandbox string, port int) string { return fmt.Sprintf("%s/%d", sandbox, port) }

func (f *fakeResolver) Lookup(ctx context.Context, sandbox string, port int, token string) (preview.Exposure, preview.DialFunc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	fe := f.exps[key(sandbox, port)]
	if fe == nil || fe.exp.Token != token {
		return preview.Exposure{}, nil, errdefs.NotFound("no preview URL for port %d of sandbox %q", port, sandbox)
	}
	if fe.stale {
		return preview.Exposure{}, nil, fmt.Errorf("sandbox %q restarted: %w", sandbox, preview.ErrStale)
	}
	dial := fe.dial
	if dial == nil {
		addr := fe.upstream
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	counted := func(ctx context.Context) (net.Conn, error) {
		f.mu.Lock()
		f.dials++
		f.mu.Unlock()
		return dial(ctx)
	}
	return fe.exp, counted, nil
}

func (f *fakeResolver) counts() (lookups, dials int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lookups, f.dials
}

type env struct {
	t   *testing.T
	res *fakeResolver
	p   *preview.Proxy
	cfg preview.Config
	srv *httptest.Server
	hc  *http.Client // dials the proxy whatever the URL's host name
}

func newEnv(t *testing.T, adjust func(*preview.Config)) *env {
	t.Helper()
	e := &env{t: t, res: &fakeResolver{exps: map[string]*fakeExp{}}}
	// The listener comes first so PublicHost can name its port.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = preview.Config{PublicHost: fmt.Sprintf("localhost:%d", ln.Addr().(*net.TCPAddr).Port), APIKey: testKey}
	if adjust != nil {
		adjust(&e.cfg)
	}
	e.p = preview.NewProxy(e.res, e.cfg)
	e.srv = &httptest.Server{Listener: ln, Config: preview.NewServer("", e.p)}
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	addr := ln.Addr().String()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	e.hc = &http.Client{
		Transport:     tr,
		Timeout:       deadline,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return e
}

// upstream starts a "service in the sandbox".
func upstream(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

func (e *env) expose(sandbox string, port int, upstreamAddr string, private bool) preview.Exposure {
	exp := preview.Exposure{Sandbox: sandbox, Port: port, Token: preview.NewToken(), Private: private, RunID: "run-1", CreatedAt: time.Now()}
	e.res.mu.Lock()
	e.res.exps[key(sandbox, port)] = &fakeExp{exp: exp, upstream: upstreamAddr}
	e.res.mu.Unlock()
	return exp
}

func (e *env) setStale(exp preview.Exposure) {
	e.res.mu.Lock()
	e.res.exps[key(exp.Sandbox, exp.Port)].stale = true
	e.res.mu.Unlock()
}

func (e *env) setDial(exp preview.Exposure, d preview.DialFunc) {
	e.res.mu.Lock()
	e.res.exps[key(exp.Sandbox, exp.Port)].dial = d
	e.res.mu.Unlock()
}

func (e *env) url(exp preview.Exposure) string { return preview.URL(e.cfg, exp) }

func (e *env) pathURL(exp preview.Exposure) string { return preview.PathURL(e.srv.URL, exp) }

func (e *env) get(url string, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// seen is what the echo upstream reports about the request it got.
type seen struct {
	Service string
	Method  string
	Path    string
	RawPath string
	Query   string
	Host    string
	Header  http.Header
}

// echoUpstream answers every request with a JSON description of it.
func echoUpstream(t *testing.T, name string) string {
	return upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(seen{Service: name, Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath,
			Query: r.URL.RawQuery, Host: r.Host, Header: r.Header})
	}))
}

func decodeSeen(t *testing.T, resp *http.Response) seen {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var s seen
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func decodeError(t *testing.T, resp *http.Response, status int, code string) api.Error {
	t.Helper()
	var e api.Error
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	if e.Code != code {
		t.Fatalf("code %q, want %q (%s)", e.Code, code, e.Message)
	}
	if !strings.Contains(resp.Header.Get("Cache-Control"), "no-store") {
		t.Errorf("error response is cacheable")
	}
	return e
}

package local

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/preview"
)

func TestScratchPortsLifecycle(t *testing.T) {
	r := newRig(t)
	pln, _ := net.Listen("tcp4", "127.0.0.1:0")
	pcfg := preview.Config{PublicHost: "localhost:" + strings.Split(pln.Addr().String(), ":")[1], APIKey: "k"}
	var m *Manager
	prox := preview.NewProxy(preview.ResolverFunc(func(ctx2 context.Context, s string, p int, tk string) (preview.Exposure, preview.DialFunc, error) {
		return m.Lookup(ctx2, s, p, tk)
	}), pcfg)
	r.cfg.Previews = prox
	r.cfg.PreviewURLs = func(e preview.Exposure) (string, string) {
		return preview.URL(pcfg, e), preview.PathURL("http://"+pln.Addr().String(), e)
	}
	m = newAttached(t, r.cfg)
	r.m = m
	srv := &httptest.Server{Listener: pln, Config: preview.NewServer("", prox)}
	srv.Start()
	defer srv.Close()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from sandbox") }))
	defer svc.Close()
	port := svc.Listener.Addr().(*net.TCPAddr).Port

	if _, _, err := plane(m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "my-box"}, false); err != nil {
		t.Fatal(err)
	}
	get := func(u string) (int, string) {
		resp, err := http.Get(u) // path form: no wildcard DNS in tests
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ep, err := m.ExposePort(ctx, "my-box", api.ExposePortRequest{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(ep)
	t.Logf("exposed: %s", j)
	if c, b := get(ep.PathURL); c != 200 || b != "hello from sandbox" {
		t.Fatalf("active: %d %s", c, b)
	}
	if err := plane(m).Sleep(ctx, "my-box"); err != nil {
		t.Fatal(err)
	}
	if c, b := get(ep.PathURL); c != 410 {
		t.Fatalf("sleeping: %d %s", c, b)
	}
	if sb, _ := plane(m).Get(ctx, "my-box"); sb.State != api.StateSleeping {
		t.Fatalf("stale URL woke the sandbox: %s", sb.State)
	}
	if _, err := plane(m).Exec(ctx, "my-box", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if c, _ := get(ep.PathURL); c != 410 {
		t.Fatalf("after restart: %d", c)
	}
	ports, _ := m.ListPorts(ctx, "my-box")
	if len(ports) != 1 || ports[0].Status != api.PortStale {
		t.Fatalf("list: %+v", ports)
	}
	ep2, err := m.ExposePort(ctx, "my-box", api.ExposePortRequest{Port: port, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := get(ep.PathURL); c != 404 {
		t.Fatalf("old token after re-expose: %d", c)
	}
	if c, _ := get(ep2.PathURL); c != 401 {
		t.Fatalf("private without key: %d", c)
	}
	req, _ := http.NewRequest("GET", ep2.PathURL, nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("private with key: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := m.UnexposePort(ctx, "my-box", port); err != nil {
		t.Fatal(err)
	}
	if c, _ := get(ep2.PathURL); c != 404 {
		t.Fatalf("after unexpose: %d", c)
	}
	ep3, _ := m.ExposePort(ctx, "my-box", api.ExposePortRequest{Port: port})
	if err := plane(m).Destroy(ctx, "my-box"); err != nil {
		t.Fatal(err)
	}
	if c, _ := get(ep3.PathURL); c != 404 {
		t.Fatalf("after destroy: %d", c)
	}
	if _, err := plane(m).Get(ctx, "my-box"); err == nil {
		t.Fatal("lookup recreated the sandbox")
	}
}

// TestPortsCallerToken (issue 12 item 14): a caller-chosen token gives a
// stable URL: stale while the sandbox sleeps, the same URL again when the
// port is exposed in a new run. Two sandboxes with one token have two
// URLs, and neither reaches the other's. Bad tokens are refused (400).
func TestPortsCallerToken(t *testing.T) {
	r := newRig(t)
	pcfg := preview.Config{PublicHost: "localhost:7080", APIKey: "k"}
	r.cfg.PreviewURLs = func(e preview.Exposure) (string, string) {
		return preview.URL(pcfg, e), preview.PathURL("http://127.0.0.1:7080", e)
	}
	rev := &revokeRecorder{}
	r.cfg.Previews = rev
	m := newAttached(t, r.cfg)
	for _, n := range []string{"tok-a", "tok-b"} {
		if _, _, err := plane(m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: n}, false); err != nil {
			t.Fatal(err)
		}
	}
	const tk = "stable0preview"
	ep, err := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8000, Token: tk})
	if err != nil || !strings.Contains(ep.URL, "8000-tok-a-"+tk+".") || ep.Status != api.PortActive {
		t.Fatalf("expose with a token: %+v %v", ep, err)
	}
	if e, _, err := m.Lookup(ctx, "tok-a", 8000, tk); err != nil || e.Token != tk {
		t.Fatalf("lookup: %+v %v", e, err)
	}
	if err := plane(m).Sleep(ctx, "tok-a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Lookup(ctx, "tok-a", 8000, tk); !errors.Is(err, preview.ErrStale) {
		t.Fatalf("while asleep: %v", err)
	}
	if ports, _ := m.ListPorts(ctx, "tok-a"); len(ports) != 1 || ports[0].URL != ep.URL || ports[0].Status != api.PortStale {
		t.Fatalf("listed while asleep: %+v", ports)
	}
	if _, err := plane(m).Exec(ctx, "tok-a", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Lookup(ctx, "tok-a", 8000, tk); !errors.Is(err, preview.ErrStale) {
		t.Fatalf("new run, not yet exposed again: %v", err)
	}
	ep2, err := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8000, Token: tk})
	if err != nil || ep2.URL != ep.URL || ep2.PathURL != ep.PathURL || ep2.Status != api.PortActive {
		t.Fatalf("exposed again in a new run: %+v (first %+v) %v", ep2, ep, err)
	}
	if _, _, err := m.Lookup(ctx, "tok-a", 8000, tk); err != nil {
		t.Fatalf("the same URL after re-expose: %v", err)
	}
	// Repeating the same exposure in the same run keeps open tunnels;
	// making it private ends them.
	rev.n = 0
	if _, err := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8000, Token: tk}); err != nil || rev.n != 0 {
		t.Fatalf("repeated exposure: revoked %d times, %v", rev.n, err)
	}
	if _, err := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8000, Token: tk, Private: true}); err != nil || rev.n != 1 {
		t.Fatalf("made private: revoked %d times, %v", rev.n, err)
	}
	if _, err := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8000, Token: tk}); err != nil || rev.n != 2 {
		t.Fatalf("made public again: revoked %d times, %v", rev.n, err)
	}
	// Another sandbox may use the same token: its URL is its own.
	epb, err := m.ExposePort(ctx, "tok-b", api.ExposePortRequest{Port: 8000, Token: tk})
	if err != nil || epb.URL == ep.URL || !strings.Contains(epb.URL, "8000-tok-b-"+tk+".") {
		t.Fatalf("second sandbox, same token: %+v %v", epb, err)
	}
	if e, _, err := m.Lookup(ctx, "tok-b", 8000, tk); err != nil || e.Sandbox != "tok-b" {
		t.Fatalf("lookup b: %+v %v", e, err)
	}
	if _, _, err := m.Lookup(ctx, "tok-b", 9000, tk); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a's token on b's unexposed port: %v", err)
	}
	// Without a token the default stays random, and rotates.
	r1, _ := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8001})
	r2, _ := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8001})
	if r1.URL == r2.URL || strings.Contains(r1.URL, tk) {
		t.Fatalf("random tokens: %s %s", r1.URL, r2.URL)
	}
	for _, bad := range []string{"short", strings.Repeat("a", 33), "UPPERCASE1", "has-dash01", "under_score", "dot.ted01"} {
		_, err := m.ExposePort(ctx, "tok-a", api.ExposePortRequest{Port: 8000, Token: bad})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || api.HTTPStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "[a-z0-9]") {
			t.Fatalf("token %q: %v", bad, err)
		}
	}
	if _, _, err := m.Lookup(ctx, "tok-a", 8000, tk); err != nil {
		t.Fatalf("a refused token changed the exposure: %v", err)
	}
}

type revokeRecorder struct{ n int }

func (r *revokeRecorder) Revoke(sandbox string, port int) { r.n++ }

package controller

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
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
	m = New(r.cfg)
	r.m = m
	srv := &httptest.Server{Listener: pln, Config: preview.NewServer("", prox)}
	srv.Start()
	defer srv.Close()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from sandbox") }))
	defer svc.Close()
	port := svc.Listener.Addr().(*net.TCPAddr).Port

	if _, _, err := m.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "my-box"}, false); err != nil {
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
	if err := m.Sleep(ctx, "my-box"); err != nil {
		t.Fatal(err)
	}
	if c, b := get(ep.PathURL); c != 410 {
		t.Fatalf("sleeping: %d %s", c, b)
	}
	if sb, _ := m.Get(ctx, "my-box"); sb.State != api.StateSleeping {
		t.Fatalf("stale URL woke the sandbox: %s", sb.State)
	}
	if _, err := m.Exec(ctx, "my-box", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
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
	if err := m.Destroy(ctx, "my-box"); err != nil {
		t.Fatal(err)
	}
	if c, _ := get(ep3.PathURL); c != 404 {
		t.Fatalf("after destroy: %d", c)
	}
	if _, err := m.Get(ctx, "my-box"); err == nil {
		t.Fatal("lookup recreated the sandbox")
	}
}

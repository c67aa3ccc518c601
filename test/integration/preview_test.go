//go:build integration

package integration

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

func get(t *testing.T, rawURL string, header http.Header) (int, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	// Host-form URLs end in localhost:<port>; dial the preview listener and
	// send the name as the Host header, as a browser resolving *.localhost would.
	req, _ := http.NewRequest("GET", "http://"+d.previewListen+u.RequestURI(), nil)
	req.Host = u.Host
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func TestPreviewURLs(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-preview"})
	run(t, "it-preview", "mkdir -p /home/user/site && echo hello-preview > /home/user/site/index.html")
	// The server listens on 127.0.0.1 only: preview URLs reach it through
	// the agent, with the sandbox's internet off.
	run(t, "it-preview", "cd /home/user/site && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := run(t, "it-preview", "python3 -c \"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\" 2>/dev/null"); r.Stdout == "200\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("http.server did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t0 := time.Now()
	p, err := d.c.ExposePort(ctx, "it-preview", api.ExposePortRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, p.URL, nil)
	t.Logf("expose to first proxied response: %s", time.Since(t0).Round(time.Microsecond))
	if code != 200 || !strings.Contains(body, "hello-preview") {
		t.Fatalf("host-form URL %s: %d %q", p.URL, code, body)
	}
	if code, body := get(t, p.PathURL+"index.html", nil); code != 200 || !strings.Contains(body, "hello-preview") {
		t.Fatalf("path-form URL %s: %d %q", p.PathURL, code, body)
	}
	// A wrong token is a 404.
	bad := strings.Replace(p.PathURL, "-it-preview-", "-it-preview-x", 1)
	if code, _ := get(t, bad, nil); code != 404 {
		t.Fatalf("wrong token: %d", code)
	}
	// Private mode needs the API key.
	pp, err := d.c.ExposePort(ctx, "it-preview", api.ExposePortRequest{Port: 8000, Private: true})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, p.URL, nil); code != 404 {
		t.Fatalf("rotated-away URL: %d, want 404", code)
	}
	if code, _ := get(t, pp.URL, nil); code != 401 {
		t.Fatalf("private URL without the key: %d", code)
	}
	key := readKey(t)
	if code, _ := get(t, pp.URL, http.Header{"Authorization": {"Bearer " + key}}); code != 200 {
		t.Fatalf("private URL with the key: %d", code)
	}
	// After the sandbox sleeps, the URL is stale (410) and does not wake it.
	if err := d.c.Sleep(ctx, "it-preview"); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, pp.URL, http.Header{"Authorization": {"Bearer " + key}}); code != 410 {
		t.Fatalf("URL after sleep: %d, want 410", code)
	}
	if sb, _ := d.c.Get(ctx, "it-preview"); sb.State != api.StateSleeping {
		t.Fatalf("a stale preview URL woke the sandbox: %s", sb.State)
	}
	// Unexpose, and destroy: 404.
	if err := d.c.UnexposePort(ctx, "it-preview", 8000); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, pp.URL, http.Header{"Authorization": {"Bearer " + key}}); code != 404 {
		t.Fatalf("unexposed URL: %d", code)
	}
	if err := d.c.Destroy(ctx, "it-preview"); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, pp.URL, nil); code != 404 {
		t.Fatalf("URL of a destroyed sandbox: %d", code)
	}
	if _, err := d.c.Get(ctx, "it-preview"); err == nil {
		t.Fatal("preview request recreated a destroyed sandbox")
	}
}

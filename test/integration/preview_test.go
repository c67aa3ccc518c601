//go:build integration

package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
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

// TestPreviewStableToken (issue 12 item 14): a caller-chosen token gives
// a URL that is stale while the sandbox sleeps and the same again once
// the port is exposed in the new run; a second sandbox with the same
// token gets its own URL; a bad token is a 400 that names the rule.
func TestPreviewStableToken(t *testing.T) {
	ctx := context.Background()
	const tk = "itstable0token"
	serve := func(name, text string) {
		run(t, name, "mkdir -p /home/user/site && echo "+text+" > /home/user/site/index.html && cd /home/user/site && (nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)")
		deadline := time.Now().Add(20 * time.Second)
		for run(t, name, "python3 -c \"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\" 2>/dev/null").Stdout != "200\n" {
			if time.Now().After(deadline) {
				t.Fatal("http.server did not start")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-tok-a"})
	sandbox(t, api.CreateSandboxRequest{Name: "it-tok-b"})
	serve("it-tok-a", "from-a")
	serve("it-tok-b", "from-b")
	p, err := d.c.ExposePort(ctx, "it-tok-a", api.ExposePortRequest{Port: 8000, Token: tk})
	if err != nil || !strings.Contains(p.URL, "8000-it-tok-a-"+tk+".") {
		t.Fatalf("expose: %+v %v", p, err)
	}
	if code, body := get(t, p.URL, nil); code != 200 || !strings.Contains(body, "from-a") {
		t.Fatalf("stable URL: %d %q", code, body)
	}
	pb, err := d.c.ExposePort(ctx, "it-tok-b", api.ExposePortRequest{Port: 8000, Token: tk})
	if err != nil || pb.URL == p.URL {
		t.Fatalf("second sandbox, same token: %+v %v", pb, err)
	}
	if code, body := get(t, pb.URL, nil); code != 200 || !strings.Contains(body, "from-b") {
		t.Fatalf("b's URL: %d %q", code, body)
	}
	if err := d.c.Sleep(ctx, "it-tok-a"); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, p.URL, nil); code != 410 {
		t.Fatalf("while asleep: %d, want 410", code)
	}
	serve("it-tok-a", "from-a-again") // wakes it: a new run
	if code, _ := get(t, p.URL, nil); code != 410 {
		t.Fatalf("new run before expose: %d, want 410", code)
	}
	p2, err := d.c.ExposePort(ctx, "it-tok-a", api.ExposePortRequest{Port: 8000, Token: tk})
	if err != nil || p2.URL != p.URL || p2.PathURL != p.PathURL {
		t.Fatalf("exposed again: %+v, first %+v, %v", p2, p, err)
	}
	if code, body := get(t, p.URL, nil); code != 200 || !strings.Contains(body, "from-a-again") {
		t.Fatalf("same URL in the new run: %d %q", code, body)
	}
	for _, bad := range []string{"short", "Has-Upper-1", strings.Repeat("a", 40)} {
		_, err := d.c.ExposePort(ctx, "it-tok-a", api.ExposePortRequest{Port: 8000, Token: bad})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "8 to 32 characters from [a-z0-9]") {
			t.Fatalf("token %q: %v", bad, err)
		}
	}
}

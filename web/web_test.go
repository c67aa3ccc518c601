package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, target string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestServesEmbeddedConsole(t *testing.T) {
	h := Handler()
	cases := []struct {
		path, ctype, contains string
	}{
		{"/console/", "text/html; charset=utf-8", `src="app.js"`},
		{"/console/index.html", "text/html; charset=utf-8", `href="app.css"`},
		{"/console/app.js", "text/javascript; charset=utf-8", "berthTerm"},
		// xterm.css is bundled into app.css: without it the terminal
		// renders as a pile of unstyled spans.
		{"/console/app.css", "text/css; charset=utf-8", ".xterm-helper-textarea"},
	}
	for _, c := range cases {
		rec := get(t, h, "GET", c.path, nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", c.path, rec.Code, rec.Body)
		}
		if got := rec.Header().Get("Content-Type"); got != c.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.ctype)
		}
		if !strings.Contains(rec.Body.String(), c.contains) {
			t.Errorf("GET %s: body lacks %q", c.path, c.contains)
		}
		for _, k := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "ETag"} {
			if rec.Header().Get(k) == "" {
				t.Errorf("GET %s: no %s header", c.path, k)
			}
		}
		if got := rec.Header().Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q", c.path, got)
		}
	}
}

// The bundle must not reach for a CDN: the daemon runs on hosts without
// internet, and a third-party script would see the API key.
func TestNoExternalResources(t *testing.T) {
	// Only references count; license comments name URLs harmlessly.
	for _, name := range []string{"index.html", "app.css"} {
		b := bytes.ReplaceAll(loadAssets()[name].body, []byte(" "), nil)
		for _, bad := range []string{`="http`, `="//`, "url(http", "url(//", `url("http`, `url("//`, "@import"} {
			if bytes.Contains(b, []byte(bad)) {
				t.Errorf("%s refers to %q", name, bad)
			}
		}
	}
	csp := get(t, Handler(), "GET", "/console/", nil).Header().Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
}

func TestConditionalAndGzip(t *testing.T) {
	h := Handler()
	first := get(t, h, "GET", "/console/app.js", nil)
	etag := first.Header().Get("ETag")
	if rec := get(t, h, "GET", "/console/app.js", map[string]string{"If-None-Match": etag}); rec.Code != http.StatusNotModified {
		t.Fatalf("revalidation with matching ETag: %d, want 304", rec.Code)
	}
	// Negative control: a stale ETag must get the full body.
	if rec := get(t, h, "GET", "/console/app.js", map[string]string{"If-None-Match": `"stale"`}); rec.Code != http.StatusOK {
		t.Fatalf("stale ETag: %d, want 200", rec.Code)
	}

	gz := get(t, h, "GET", "/console/app.js", map[string]string{"Accept-Encoding": "br, gzip"})
	if gz.Header().Get("Content-Encoding") != "gzip" || gz.Header().Get("ETag") == etag {
		t.Fatalf("gzip: encoding %q etag %q (identity etag %q)", gz.Header().Get("Content-Encoding"), gz.Header().Get("ETag"), etag)
	}
	zr, err := gzip.NewReader(gz.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(plain, first.Body.Bytes()) {
		t.Fatalf("gzip body does not decode to app.js (err %v)", err)
	}
	if gz.Body.Len() >= first.Body.Len() {
		t.Fatalf("gzip body %d bytes, plain %d", gz.Body.Len(), first.Body.Len())
	}
	if rec := get(t, h, "GET", "/console/app.js", map[string]string{"Accept-Encoding": "gzip;q=0"}); rec.Header().Get("Content-Encoding") != "" {
		t.Fatal("gzip sent although q=0 refused it")
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"":                 false,
		"gzip":             true,
		"GZIP":             true,
		"br, gzip;q=0.5":   true,
		"gzip;q=0":         false,
		"gzip; q=0.000":    false,
		"*":                true,
		"identity":         false,
		"deflate, x-gzip2": false,
		"gzip;q=bogus":     false,
	} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestRejectsOtherPathsAndMethods(t *testing.T) {
	h := Handler()
	for _, p := range []string{"/console/nope.js", "/console/../web.go", "/console/%2e%2e/web.go", "/console/dist/app.js", "/v1/sandboxes", "/"} {
		if rec := get(t, h, "GET", p, nil); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
	}
	rec := get(t, h, "POST", "/console/", nil)
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
	if rec := get(t, h, "HEAD", "/console/", nil); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Errorf("HEAD: %d, %d body bytes", rec.Code, rec.Body.Len())
	}
	rec = get(t, h, "GET", "/console?x=1", nil)
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/console/?x=1" {
		t.Errorf("GET /console: %d Location %q", rec.Code, rec.Header().Get("Location"))
	}
}

func TestMountSplitsConsoleFromAPI(t *testing.T) {
	var apiHits []string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiHits = append(apiHits, r.URL.Path)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
	h := Mount(api)
	if rec := get(t, h, "GET", "/console/", nil); rec.Code != http.StatusOK {
		t.Fatalf("console through Mount: %d", rec.Code)
	}
	if rec := get(t, h, "GET", "/console", nil); rec.Code != http.StatusMovedPermanently {
		t.Fatalf("/console through Mount: %d", rec.Code)
	}
	// Paths that merely start with the word must still hit the API (and
	// its authentication), not the unauthenticated console.
	for _, p := range []string{"/v1/sandboxes", "/consolex", "/v1/console/"} {
		if rec := get(t, h, "GET", p, nil); rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s through Mount: %d, want the API's 401", p, rec.Code)
		}
	}
	if len(apiHits) != 3 {
		t.Fatalf("API saw %v, want the 3 non-console paths", apiHits)
	}
}

package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/reqinfo"
)

// dotPaths are the DELETEs that a ServeMux cleans (with a 307) into a
// DELETE of the sandbox itself or of all its processes.
var dotPaths = []string{
	"/v1/sandboxes/v/processes/..",
	"/v1/sandboxes/v/sessions/..",
	"/v1/sandboxes/v/terminals/..",
	"/v1/sandboxes/v/processes/.",
	"/v1/sandboxes/v/processes/x/../..",
	"/v1/sandboxes/v//processes",
}

// (An escaped "%2e%2e" is no segment to the mux; it reaches the route as
// the id "..", which every id validation refuses: TestValidation.)

// The API never redirects, whatever the path: a client that follows
// redirects (net/http's default client does, re-sending the DELETE after a
// 307) must not reach another route. Both the server alone and the server
// behind Guard are checked.
func TestNoRedirectForDotSegments(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		f := newFake()
		f.boxes["v"] = api.Sandbox{Name: "v", State: api.StateRunning}
		var h http.Handler = newServer(f, Options{APIKey: testKey})
		if guarded {
			h = Guard(h, GuardOptions{})
		}
		ts := httptest.NewServer(h)
		for _, p := range dotPaths {
			req, _ := http.NewRequest(http.MethodDelete, ts.URL+p, nil)
			req.URL.RawPath = "" // keep the path as written
			req.URL.Opaque = "//" + strings.TrimPrefix(ts.URL, "http://") + p
			req.Header.Set("Authorization", "Bearer "+testKey)
			var redirected []string
			hc := &http.Client{CheckRedirect: func(r *http.Request, via []*http.Request) error {
				redirected = append(redirected, r.Method+" "+r.URL.Path)
				return nil // follow, as http.DefaultClient does
			}}
			res, err := hc.Do(req)
			if err != nil {
				t.Fatalf("guarded=%v DELETE %s: %v", guarded, p, err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var e api.Error
			if len(redirected) > 0 || res.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Code != "invalid_argument" {
				t.Errorf("guarded=%v DELETE %s: %d %s (redirects followed: %v), want 400 invalid_argument", guarded, p, res.StatusCode, b, redirected)
			}
			if !strings.Contains(e.Message, `".."`) && !strings.Contains(e.Message, `"."`) && !strings.Contains(e.Message, "empty segment") {
				t.Errorf("guarded=%v DELETE %s: message %q does not name the problem", guarded, p, e.Message)
			}
		}
		if _, ok := f.boxes["v"]; !ok {
			t.Fatalf("guarded=%v: sandbox v was destroyed", guarded)
		}
		ts.Close()
	}
}

// Negative control: what the same route table does on a stock ServeMux
// (what berth's server did before): the DELETE of …/processes/.. is
// redirected with a 307 to /v1/sandboxes/v, and a following client deletes
// the sandbox.
func TestStockServeMuxRedirectsDotSegments(t *testing.T) {
	mux := http.NewServeMux()
	var deleted []string
	var mu sync.Mutex
	mux.HandleFunc("DELETE /v1/sandboxes/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		deleted = append(deleted, r.PathValue("name"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{name}/processes/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/sandboxes/v/processes/..", nil)
	res, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != "/v1/sandboxes/v" {
		t.Fatalf("stock mux: %d Location %q; the control no longer shows the redirect", res.StatusCode, res.Header.Get("Location"))
	}
	req, _ = http.NewRequest(http.MethodDelete, ts.URL+"/v1/sandboxes/v/processes/..", nil)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent || len(deleted) != 1 || deleted[0] != "v" {
		t.Fatalf("followed redirect: %d, deleted %v; want the sandbox deleted", res.StatusCode, deleted)
	}
}

// A trailing-slash redirect (DELETE /v1/images, whose pattern
// /v1/images/{ref...} the mux would redirect to) is a JSON error too.
func TestNoTrailingSlashRedirect(t *testing.T) {
	ts := newTestServer(t, newFake(), nil)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/v1/images", "/v1/sandboxes/v/processes/x/logs/"} {
		req, _ := http.NewRequest(http.MethodDelete, ts.URL+p, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 300 && res.StatusCode < 400 || res.Header.Get("Location") != "" || !json.Valid(b) {
			t.Errorf("DELETE %s: %d Location %q %s", p, res.StatusCode, res.Header.Get("Location"), b)
		}
	}
}

// rawPost sends a POST that announces a body and sends none, and returns
// the connection and a reader of it.
func rawPost(t *testing.T, addr, path, extra string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"+extra+"\r\n"); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// An unauthenticated request that announces a body it never sends is
// answered 401 at once and its connection closed: the body is never waited
// for. Negative control (Weak): net/http reads the announced body before it
// sends the answer, so nothing comes back and the connection stays open.
func TestUnauthenticatedSlowBodyAnsweredAndClosed(t *testing.T) {
	for _, weak := range []bool{false, true} {
		ts := httptest.NewServer(Guard(newServer(newFake(), Options{APIKey: testKey}), GuardOptions{Weak: weak}))
		addr := strings.TrimPrefix(ts.URL, "http://")
		c, br := rawPost(t, addr, "/v1/sandboxes", "")
		if weak {
			_ = c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
			if line, err := br.ReadString('\n'); err == nil || !isTimeout(err) {
				t.Fatalf("weak: got %q %v; the negative control no longer shows the held connection", line, err)
			}
			ts.CloseClientConnections()
			ts.Close()
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusUnauthorized || !res.Close {
			t.Fatalf("answer %d close=%v %s", res.StatusCode, res.Close, b)
		}
		if n, err := br.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection not closed after the 401: %d %v", n, err)
		}
		ts.Close()
	}
}

// An authenticated JSON body that does not arrive within BodyTimeout is
// abandoned with a 400 that says so, and the connection closed; the
// long-lived routes (uploads) are bounded per pause instead.
func TestBodyReadTimeout(t *testing.T) {
	ts := httptest.NewServer(Guard(newServer(newFake(), Options{APIKey: testKey}), GuardOptions{BodyTimeout: 300 * time.Millisecond, StreamIdle: 300 * time.Millisecond}))
	defer ts.Close()
	addr := strings.TrimPrefix(ts.URL, "http://")
	for _, path := range []string{"/v1/sandboxes", "/v1/sandboxes/v/files/content?path=/x"} {
		method := "POST"
		if strings.Contains(path, "files") {
			method = "PUT"
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, method+" "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testKey+"\r\nContent-Length: 100000\r\n\r\n{")
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: no answer: %v", path, err)
		}
		b, _ := io.ReadAll(res.Body)
		if method == "POST" && (res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "not received within 300ms")) {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
		if method == "PUT" && res.StatusCode < 400 {
			t.Fatalf("%s: stalled upload answered %d %s", path, res.StatusCode, b)
		}
		if _, err := br.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%s: connection not closed: %v", path, err)
		}
	}
}

// A failed request makes one log line with its method, route, status,
// duration, sandbox, tenant and request id; the id is in the error body and
// the response header; the key and query tokens are never logged.
func TestRequestLogAndRequestID(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	s := newServer(newFake(), Options{APIKey: testKey, Tenants: func(k string) (string, bool) { return "acme", k == "tenant-secret-key" }})
	ts := httptest.NewServer(Guard(s, GuardOptions{Logger: logger}))
	defer ts.Close()

	req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes/nope?access_token=query-secret-token", nil)
	req.Header.Set("Authorization", "Bearer tenant-secret-key")
	req.Header.Set(reqinfo.Header, "client-id-42")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var e api.Error
	if res.StatusCode != 404 || json.Unmarshal(b, &e) != nil || e.RequestID != "client-id-42" || res.Header.Get(reqinfo.Header) != "client-id-42" {
		t.Fatalf("answer %d %s header %q", res.StatusCode, b, res.Header.Get(reqinfo.Header))
	}
	// A wrong key, and an id that is not sane (replaced by a fresh one).
	req, _ = http.NewRequest("DELETE", ts.URL+"/v1/sandboxes/other", nil)
	req.Header.Set("Authorization", "Bearer wrong-secret-key")
	req.Header.Set(reqinfo.Header, strings.Repeat("x", 200))
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if err := json.Unmarshal(b, &e); err != nil || res.StatusCode != 401 || !strings.HasPrefix(e.RequestID, "req_") || e.RequestID != res.Header.Get(reqinfo.Header) {
		t.Fatalf("401 answer %s header %q", b, res.Header.Get(reqinfo.Header))
	}

	log := buf.String()
	for _, secret := range []string{"tenant-secret-key", "wrong-secret-key", "query-secret-token", "access_token"} {
		if strings.Contains(log, secret) {
			t.Fatalf("log contains %q:\n%s", secret, log)
		}
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 log lines, got:\n%s", log)
	}
	var l1, l2 map[string]any
	if json.Unmarshal([]byte(lines[0]), &l1) != nil || json.Unmarshal([]byte(lines[1]), &l2) != nil {
		t.Fatalf("log lines are not JSON:\n%s", log)
	}
	want := map[string]any{"msg": "request", "method": "GET", "route": "GET /v1/sandboxes/{name}", "status": float64(404),
		"sandbox": "nope", "tenant": "acme", "request_id": "client-id-42", "level": "WARN"}
	for k, v := range want {
		if l1[k] != v {
			t.Errorf("log field %s = %v, want %v (line %s)", k, l1[k], v, lines[0])
		}
	}
	if _, ok := l1["duration"].(float64); !ok {
		t.Errorf("no duration in %s", lines[0])
	}
	if l2["status"] != float64(401) || l2["request_id"] != e.RequestID || l2["method"] != "DELETE" {
		t.Errorf("401 line %s", lines[1])
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A pull of something that is not an image reference is invalid (400),
// not a registry failure (503), and never reaches the backend.
func TestPullInvalidReference(t *testing.T) {
	f := newFake()
	ts := newTestServer(t, f, nil)
	for _, ref := range []string{"../../etc/passwd", "./x", "a//b", "Upper/Case", "x/../y", ":tag", "a/b:", "/abs"} {
		r := do(t, ts, "POST", "/v1/images/pull", strings.NewReader(`{"ref":"`+ref+`"}`))
		var e api.Error
		if r.status != 400 || json.Unmarshal(r.body, &e) != nil || e.Code != "invalid_argument" || !strings.Contains(e.Message, "invalid image reference") {
			t.Errorf("pull %q: %d %s", ref, r.status, r.body)
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("backend called %d times", n)
	}
	for _, ref := range []string{"alpine", "node:22", "docker.io/library/node:22-bookworm", "localhost:5000/a/b_c__d-e.f:v1.2",
		"127.0.0.1:5000/x@sha256:" + strings.Repeat("a", 64), "ghcr.io/o/r@sha256:" + strings.Repeat("0", 64), "[::1]:5000/x"} {
		if err := validatePullRef(ref); err != nil {
			t.Errorf("valid ref %q refused: %v", ref, err)
		}
	}
}

// LimitListener answers a connection over the per-address cap 429 and
// one over the total cap or into the fd reserve 503, and closes it; a
// closed connection frees its slot.
func TestLimitListener(t *testing.T) {
	accept := func(ln net.Listener) chan net.Conn {
		ch := make(chan net.Conn, 16)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					close(ch)
					return
				}
				ch <- c
			}
		}()
		return ch
	}
	refusedWith := func(t *testing.T, addr string, want string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 "+want) || !strings.Contains(string(b), "resource_exhausted") {
			t.Fatalf("over the cap: %q %v, want %s and close", b, err, want)
		}
	}
	base, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(base, ConnLimits{MaxConns: 3, MaxConnsPerIP: 2})
	defer ln.Close()
	ch := accept(ln)
	addr := base.Addr().String()
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, <-ch)
	}
	refusedWith(t, addr, "429")
	// From another address (127.0.0.2 is loopback too): the third slot.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c3, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	held = append(held, <-ch)
	c4, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c4.SetReadDeadline(time.Now().Add(20 * time.Second))
	if b, _ := io.ReadAll(c4); !strings.HasPrefix(string(b), "HTTP/1.1 503") {
		t.Fatalf("over the total cap: %q", b)
	}
	c4.Close()
	held[0].Close() // frees one slot of 127.0.0.1
	c5, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c5.Close()
	select {
	case c := <-ch:
		c.Close()
	case <-time.After(20 * time.Second):
		t.Fatal("a freed slot was not reused")
	}

	// A reserve as large as the fd limit refuses everything.
	base2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2 := LimitListener(base2, ConnLimits{FDReserve: fdLimit() + 1})
	defer ln2.Close()
	accept(ln2)
	refusedWith(t, base2.Addr().String(), "503")

	// Off (the negative control's switch): no cap at all.
	base3, _ := net.Listen("tcp", "127.0.0.1:0")
	ln3 := LimitListener(base3, ConnLimits{MaxConns: 1, MaxConnsPerIP: 1, Off: true})
	defer ln3.Close()
	ch3 := accept(ln3)
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", base3.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case <-ch3:
		case <-time.After(20 * time.Second):
			t.Fatal("Off still caps")
		}
	}
}

// 401 lines are rate-limited (anyone can cause them), and the next line
// logged says how many were left out.
func TestUnauthenticatedLinesRateLimited(t *testing.T) {
	var buf syncBuffer
	g := Guard(newServer(newFake(), Options{APIKey: testKey}), GuardOptions{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}).(*guard)
	for i := 0; i < 200; i++ {
		g.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/sandboxes", nil))
	}
	n := strings.Count(buf.String(), "\n")
	if n < 1 || n > 2*unauthLinesPerSecond {
		t.Fatalf("%d lines for 200 unauthenticated requests", n)
	}
	g.unauthWindow = time.Time{} // the next second
	g.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/sandboxes", nil))
	if !strings.Contains(buf.String(), `"suppressed_401_lines":`) {
		t.Fatalf("no count of suppressed lines:\n%s", buf.String())
	}
}

// Traffic proxied to a sandbox's own server keeps its path (not checked,
// not logged); E2B-face lines name the sandbox from the path or header.
func TestGuardPassthroughAndE2BLines(t *testing.T) {
	var buf syncBuffer
	var got string
	h := Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.URL.Path }), GuardOptions{
		Logger:      slog.New(slog.NewJSONHandler(&buf, nil)),
		Passthrough: func(r *http.Request) bool { return strings.HasPrefix(r.Host, "3000-") },
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "http://3000-abcdefghij0123456789.localhost/a//secret-path", nil))
	if w.Code != 200 || got != "/a//secret-path" {
		t.Fatalf("passthrough: %d %q", w.Code, got)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "http://localhost/a//b", nil))
	if w.Code != 400 {
		t.Fatalf("non-passthrough //: %d", w.Code)
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("DELETE", "http://localhost/sandboxes/abcdefghij0123456789", nil))
	log := buf.String()
	if strings.Contains(log, "secret-path") || !strings.Contains(log, `"route":"(app in sandbox)","status":200,`) ||
		!strings.Contains(log, `"route":"/sandboxes/abcdefghij0123456789","status":200,`) || strings.Count(log, `"sandbox":"abcdefghij0123456789"`) != 2 {
		t.Fatalf("log:\n%s", log)
	}
}

// "." and ".." (escaped, so that no mux sees a dot segment) are refused as
// ids by every route that takes one, before the backend is called.
func TestDotIDsInvalidEverywhere(t *testing.T) {
	f := newFake()
	ts := newTestServer(t, f, nil)
	for _, dot := range []string{"%2e", "%2e%2e"} {
		for _, c := range []struct{ method, path string }{
			{"DELETE", "/v1/sandboxes/" + dot},
			{"DELETE", "/v1/sandboxes/v/processes/" + dot},
			{"GET", "/v1/sandboxes/v/processes/" + dot},
			{"DELETE", "/v1/sandboxes/v/sessions/" + dot},
			{"DELETE", "/v1/sandboxes/v/terminals/" + dot},
			{"DELETE", "/v1/sandboxes/v/code/contexts/" + dot},
			{"DELETE", "/v1/snapshots/" + dot},
			{"DELETE", "/v1/backups/" + dot},
		} {
			r := do(t, ts, c.method, c.path, nil)
			if r.status != 400 || r.apiError(t).Code != "invalid_argument" {
				t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
			}
		}
	}
	if n := f.calls.Load(); n != 0 {
		t.Fatalf("backend called %d times", n)
	}
}

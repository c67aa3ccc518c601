package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const testKey = "test-key-0123456789"

func newTestServer(t *testing.T, f *fakeBackend, mod func(*server)) *httptest.Server {
	t.Helper()
	s := newServer(f, Options{APIKey: testKey, Version: "v-test", Logf: t.Logf})
	if mod != nil {
		mod(s)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) apiError(t *testing.T) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %q", err, r.body)
	}
	if e.Code == "" || e.Message == "" {
		t.Fatalf("error body lacks code or message: %q", r.body)
	}
	return e
}

func do(t *testing.T, ts *httptest.Server, method, path string, body io.Reader, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp{res.StatusCode, res.Header, b}
}

func TestAuth(t *testing.T) {
	f := newFake()
	ts := newTestServer(t, f, nil)
	cases := []struct {
		name, method, path, auth string
		want                     int
	}{
		{"health needs no key", "GET", "/v1/health", "", 200},
		{"no header", "GET", "/v1/sandboxes", "", 401},
		{"wrong key", "GET", "/v1/sandboxes", "Bearer nope", 401},
		{"key prefix", "GET", "/v1/sandboxes", "Bearer " + testKey[:5], 401},
		{"key plus suffix", "GET", "/v1/sandboxes", "Bearer " + testKey + "x", 401},
		{"basic scheme", "GET", "/v1/sandboxes", "Basic " + testKey, 401},
		{"bare key", "GET", "/v1/sandboxes", testKey, 401},
		{"right key", "GET", "/v1/sandboxes", "Bearer " + testKey, 200},
		{"scheme is case-insensitive", "GET", "/v1/sandboxes", "bearer " + testKey, 200},
		// Unknown routes must not be distinguishable without a key.
		{"unknown route no key", "GET", "/v1/secret", "", 401},
		{"wrong method no key", "PATCH", "/v1/sandboxes", "", 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, ts, c.method, c.path, nil, "Authorization", c.auth)
			if r.status != c.want {
				t.Fatalf("status %d, want %d (%s)", r.status, c.want, r.body)
			}
			if c.want == 401 {
				if e := r.apiError(t); e.Code != "unauthenticated" {
					t.Fatalf("code %q", e.Code)
				}
				if r.header.Get("WWW-Authenticate") == "" {
					t.Fatal("401 without WWW-Authenticate")
				}
			}
		})
	}
	if n := f.calls.Load(); n != 2 { // the two authorized lists
		t.Fatalf("backend called %d times, want 2", n)
	}
	var h api.Health
	if err := json.Unmarshal(do(t, ts, "GET", "/v1/health", nil).body, &h); err != nil || h.Status != "ok" || h.Version != "v-test" {
		t.Fatalf("health = %+v, %v", h, err)
	}
}

func TestEmptyAPIKeyFailsClosed(t *testing.T) {
	ts := httptest.NewServer(New(newFake(), Options{}))
	defer ts.Close()
	for _, auth := range []string{"", "Bearer ", "Bearer  "} {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", auth)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Fatalf("auth %q: status %d, want 401", auth, res.StatusCode)
		}
	}
}

func TestErrorStatusMapping(t *testing.T) {
	cases := []struct {
		err  error
		want int
		code string
	}{
		{errdefs.NotFound("sandbox %q not found", "x"), 404, "not_found"},
		{errdefs.AlreadyExists("exists"), 409, "already_exists"},
		{errdefs.InvalidArgument("bad"), 400, "invalid_argument"},
		{errdefs.FailedPrecondition("sleeping"), 409, "failed_precondition"},
		{errdefs.Unavailable("agent down"), 503, "unavailable"},
		{errdefs.ResourceExhausted("too many"), 429, "resource_exhausted"},
		{errdefs.PermissionDenied("no"), 403, "permission_denied"},
		{errdefs.Unauthenticated("who"), 401, "unauthenticated"},
		{fmt.Errorf("waking: %w", context.DeadlineExceeded), 504, "deadline_exceeded"},
		{fmt.Errorf("start: %w", errdefs.Unavailable("runc gone")), 503, "unavailable"},
		{errors.New("disk on fire"), 500, "internal"},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFake()
			f.getErr = c.err
			ts := newTestServer(t, f, nil)
			r := do(t, ts, "GET", "/v1/sandboxes/box", nil)
			if r.status != c.want {
				t.Fatalf("status %d, want %d", r.status, c.want)
			}
			e := r.apiError(t)
			if e.Code != c.code || e.Message != c.err.Error() {
				t.Fatalf("body %+v, want code %q message %q", e, c.code, c.err.Error())
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
		})
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	ts := newTestServer(t, newFake(), nil)
	r := do(t, ts, "GET", "/v1/nope", nil)
	if r.status != 404 || r.apiError(t).Code != "not_found" {
		t.Fatalf("unknown route: %d %s", r.status, r.body)
	}
	r = do(t, ts, "PATCH", "/v1/sandboxes", nil)
	if r.status != 405 {
		t.Fatalf("wrong method: %d %s", r.status, r.body)
	}
	r.apiError(t)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow = %q", allow)
	}
	// Non-canonical paths are not redirected (an API has no reason to).
	// (The test client would follow a redirect to /v1/sandboxes/b and
	// see its 404; a 400 that names the segment shows there was none.)
	r = do(t, ts, "GET", "/v1/sandboxes/a/../b", nil)
	if r.status != 400 || !strings.Contains(r.apiError(t).Message, `".." segment`) {
		t.Fatalf("non-canonical path: %d %s", r.status, r.body)
	}
}

func TestGetOrCreate(t *testing.T) {
	f := newFake()
	ts := newTestServer(t, f, nil)
	var sb api.Sandbox

	r := do(t, ts, "PUT", "/v1/sandboxes/box", nil) // body optional
	if r.status != 201 {
		t.Fatalf("first PUT: %d %s", r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &sb); err != nil || sb.Name != "box" {
		t.Fatalf("sandbox %+v %v", sb, err)
	}
	r = do(t, ts, "PUT", "/v1/sandboxes/box", strings.NewReader(`{"name":"other","image":"node"}`))
	if r.status != 200 {
		t.Fatalf("second PUT: %d %s", r.status, r.body)
	}
	if f.lastCreate.Name != "box" || f.lastCreate.Image != "node" {
		t.Fatalf("path name must win over body: %+v", f.lastCreate)
	}

	r = do(t, ts, "POST", "/v1/sandboxes", strings.NewReader(`{"name":"new1","labels":{"team":"a"}}`))
	if r.status != 201 || r.header.Get("Location") != "/v1/sandboxes/new1" {
		t.Fatalf("create: %d %s %v", r.status, r.body, r.header)
	}
	r = do(t, ts, "POST", "/v1/sandboxes", strings.NewReader(`{"name":"new1"}`))
	if r.status != 409 || r.apiError(t).Code != "already_exists" {
		t.Fatalf("second create: %d %s", r.status, r.body)
	}

	r = do(t, ts, "GET", "/v1/sandboxes?state=running&label=team=a&label=x=y%3Dz", nil)
	var list api.SandboxList
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Sandboxes) != 2 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if f.lastFilter.State != "running" || f.lastFilter.Labels["team"] != "a" || f.lastFilter.Labels["x"] != "y=z" {
		t.Fatalf("filter %+v", f.lastFilter)
	}
	if r := do(t, ts, "DELETE", "/v1/sandboxes/new1", nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := do(t, ts, "DELETE", "/v1/sandboxes/new1", nil); r.status != 404 {
		t.Fatalf("delete again: %d %s", r.status, r.body)
	}
	if r := do(t, ts, "POST", "/v1/sandboxes/box/sleep", nil); r.status != 204 {
		t.Fatalf("sleep: %d %s", r.status, r.body)
	}
}

func TestEmptyListsAreArrays(t *testing.T) {
	ts := newTestServer(t, newFake(), nil)
	for _, p := range []string{"/v1/sandboxes", "/v1/images"} {
		r := do(t, ts, "GET", p, nil)
		if r.status != 200 || !strings.Contains(string(r.body), "[]") {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

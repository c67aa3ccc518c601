package server

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store/sqlite"
	"go.yaml.in/yaml/v3"
)

// TestEveryMutatingRouteDecidesIdempotency walks the route table: a
// mutating route added without a line in keyRules fails here, so no
// route silently ignores an Idempotency-Key.
func TestEveryMutatingRouteDecidesIdempotency(t *testing.T) {
	seen := map[string]bool{}
	honoured, rejected := 0, 0
	for _, rt := range routes {
		pattern := rt.method + " " + rt.path
		rule, ok := keyRules[pattern]
		if !mutating(rt.method) {
			if ok {
				t.Errorf("%s: keyRules has a rule for a route that changes nothing", pattern)
			}
			continue
		}
		seen[pattern] = true
		switch {
		case !ok:
			t.Errorf("%s: mutating route with no Idempotency-Key decision: add it to keyRules (server/idempotency.go) and docs/CONTROLLERS.md", pattern)
		case (rule.op == "") == (rule.reject == ""):
			t.Errorf("%s: a rule must either journal (op) or reject, not %+v", pattern, rule)
		case rule.op != "":
			honoured++
		default:
			rejected++
		}
	}
	for pattern := range keyRules {
		if !seen[pattern] {
			t.Errorf("keyRules has %s, which is not a mutating route", pattern)
		}
	}
	// The counts are those documented in docs/CONTROLLERS.md.
	if honoured != 44 || rejected != 6 {
		t.Errorf("%d routes honour a key and %d reject it; docs/CONTROLLERS.md says 44 and 6", honoured, rejected)
	}
}

// routePath fills a pattern's wildcards with values the fake accepts.
func routePath(path string) string {
	return strings.NewReplacer(
		"{name}", "idem", "{class}", "Counter", "{id}/{method}", "i/Ping", "{id}", "x1",
		"{port}", "8080", "{ref...}", "img", "{secret}", "tok",
	).Replace(path)
}

// routeBody is a body each route's decoder accepts, so that the first
// call's answer is the route's own and not a decode error.
var routeBody = map[string]string{
	"POST /v1/sandboxes":                                   `{"name":"idem"}`,
	"POST /v1/sandboxes/{name}/exec":                       `{"cmd":["true"]}`,
	"POST /v1/sandboxes/{name}/files/mkdir":                `{"path":"/d"}`,
	"POST /v1/sandboxes/{name}/files/rename":               `{"from":"/a","to":"/b"}`,
	"POST /v1/images/pull":                                 `{"ref":"docker.io/library/alpine:3"}`,
	"POST /v1/sandboxes/{name}/ports":                      `{"port":8080}`,
	"POST /v1/sandboxes/{name}/processes":                  `{"cmd":["sleep","1"]}`,
	"POST /v1/sandboxes/{name}/processes/{id}/wait-log":    `{"pattern":"x"}`,
	"POST /v1/sandboxes/{name}/processes/{id}/wait-port":   `{"port":8080}`,
	"POST /v1/sandboxes/{name}/sessions/{id}/exec":         `{"cmd":["true"]}`,
	"POST /v1/sandboxes/{name}/git/checkout":               `{"url":"https://127.0.0.1:1/r.git"}`,
	"POST /v1/sandboxes/{name}/code/run":                   `{"code":"1"}`,
	"PUT /v1/sandboxes/{name}/network":                     `{}`,
	"PUT /v1/secrets/{secret}":                             `{"value":"s3cr3t-value"}`,
	"POST /v1/sandboxes/{name}/terminals":                  `{}`,
	"POST /v1/sandboxes/{name}/code/contexts":              `{}`,
	"POST /v1/sandboxes/{name}/code/contexts/{id}/restart": ``,
}

func bodyOf(pattern, method string) string {
	if b, ok := routeBody[pattern]; ok {
		return b
	}
	if method == http.MethodDelete {
		return ""
	}
	return `{}`
}

// TestHonouredRoutesReplay: on every route that honours a key, a retry
// with the same key and request gets the first answer, marked replayed,
// without reaching the backend again; the same key with another request
// is refused.
func TestHonouredRoutesReplay(t *testing.T) {
	f := newFake()
	// The dev-loop routes reach a real in-process agent, so that what is
	// replayed is the agent's answer.
	ag := agenttest.Start(t)
	cl := agentclient.New(ag.Socket)
	t.Cleanup(cl.Close)
	f.agentFn = func(ctx context.Context, name string) (*agentclient.Client, func(), error) {
		return cl, func() {}, nil
	}
	ts := objectServer(t, f, filepath.Join(t.TempDir(), "state.db"))
	for _, rt := range routes {
		pattern := rt.method + " " + rt.path
		rule := keyRules[pattern]
		if rule.op == "" {
			continue
		}
		path, body := routePath(rt.path), bodyOf(pattern, rt.method)
		key := "k-" + rule.op
		first := do(t, ts, rt.method, path, strings.NewReader(body), "Idempotency-Key", key)
		calls := f.calls.Load()
		if first.status >= 500 {
			// A server failure is not an answer: the retry runs again.
			again := do(t, ts, rt.method, path, strings.NewReader(body), "Idempotency-Key", key)
			if again.header.Get(api.IdempotentReplayHeader) != "" {
				t.Errorf("%s: a %d answer was replayed", pattern, first.status)
			}
			continue
		}
		again := do(t, ts, rt.method, path, strings.NewReader(body), "Idempotency-Key", key)
		if again.status != first.status || string(again.body) != string(first.body) || again.header.Get(api.IdempotentReplayHeader) != "true" {
			t.Errorf("%s: retry answered %d %q (replayed %q), want the first answer %d %q", pattern, again.status, again.body, again.header.Get(api.IdempotentReplayHeader), first.status, first.body)
		}
		if n := f.calls.Load(); n != calls {
			t.Errorf("%s: the replay reached the backend (%d calls)", pattern, n-calls)
		}
		// Another request under the same key: another query, or another body.
		other := do(t, ts, rt.method, path+"?other=1", strings.NewReader(body), "Idempotency-Key", key)
		if other.status != 400 || !strings.Contains(other.apiError(t).Message, "was used for a different request") {
			t.Errorf("%s: same key, other query: %d %s, want 400 (key used for a different request)", pattern, other.status, other.body)
		}
		if body != "" {
			other = do(t, ts, rt.method, path, strings.NewReader(body+" "), "Idempotency-Key", key)
			if other.status != 400 || !strings.Contains(other.apiError(t).Message, "was used for a different request") {
				t.Errorf("%s: same key, other body: %d %s, want 400 (key used for a different request)", pattern, other.status, other.body)
			}
		}
	}
}

// TestRejectedRoutesRefuseAKey: a route that cannot honour a key says so
// with a 400 naming the route, before doing anything; without a key it
// serves the request as before.
func TestRejectedRoutesRefuseAKey(t *testing.T) {
	f := newFake()
	ts := objectServer(t, f, filepath.Join(t.TempDir(), "state.db"))
	for _, rt := range routes {
		pattern := rt.method + " " + rt.path
		rule := keyRules[pattern]
		if rule.reject == "" {
			continue
		}
		path, body := routePath(rt.path), bodyOf(pattern, rt.method)
		calls := f.calls.Load()
		r := do(t, ts, rt.method, path, strings.NewReader(body), "Idempotency-Key", "k")
		want := "Idempotency-Key is not supported on " + pattern + ": "
		if r.status != 400 || r.apiError(t).Code != "invalid_argument" || !strings.HasPrefix(r.apiError(t).Message, want) {
			t.Errorf("%s with a key: %d %s, want 400 invalid_argument %q…", pattern, r.status, r.body, want)
		}
		if n := f.calls.Load(); n != calls {
			t.Errorf("%s: a refused request reached the backend", pattern)
		}
		r = do(t, ts, rt.method, path, strings.NewReader(body))
		if r.status == 400 && strings.Contains(string(r.body), "Idempotency-Key") {
			t.Errorf("%s without a key: %d %s", pattern, r.status, r.body)
		}
	}
}

// TestSecretNotJournaled: PUT /v1/secrets/{secret} is journaled without
// its value, in args or in the body hash's clear form.
func TestSecretNotJournaled(t *testing.T) {
	f := newFake()
	path := filepath.Join(t.TempDir(), "state.db")
	ts := objectServer(t, f, path)
	r := do(t, ts, "PUT", "/v1/secrets/tok", strings.NewReader(`{"value":"s3cr3t-value"}`), "Idempotency-Key", "k")
	if r.status >= 500 {
		t.Fatalf("set secret: %d %s", r.status, r.body)
	}
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.Journal(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range es {
		if e.Op != "set-secret" {
			continue
		}
		found = true
		if strings.Contains(e.Args+e.Detail+e.Result, "s3cr3t") || e.Args != `"[redacted]"` {
			t.Errorf("set-secret entry keeps the value: args %s detail %s", e.Args, e.Detail)
		}
	}
	if !found {
		t.Fatalf("no set-secret entry in %+v", es)
	}
}

// TestKeyedSessionCreateRunsOnce: against a real agent, a create-session
// retried with its key makes one shell, where two unkeyed calls make two.
func TestKeyedSessionCreateRunsOnce(t *testing.T) {
	f := newFake()
	ag := agenttest.Start(t)
	cl := agentclient.New(ag.Socket)
	t.Cleanup(cl.Close)
	f.agentFn = func(ctx context.Context, name string) (*agentclient.Client, func(), error) {
		return cl, func() {}, nil
	}
	ts := objectServer(t, f, filepath.Join(t.TempDir(), "state.db"))
	count := func() int {
		r := do(t, ts, "GET", "/v1/sandboxes/dev/sessions", nil)
		var l api.SessionList
		if r.status != 200 || json.Unmarshal(r.body, &l) != nil {
			t.Fatalf("list sessions: %d %s", r.status, r.body)
		}
		return len(l.Sessions)
	}
	for i := 0; i < 3; i++ {
		if r := do(t, ts, "POST", "/v1/sandboxes/dev/sessions", strings.NewReader(`{}`), "Idempotency-Key", "one-shell"); r.status != 201 && r.status != 200 {
			t.Fatalf("keyed create %d: %d %s", i, r.status, r.body)
		}
	}
	if n := count(); n != 1 {
		t.Fatalf("three keyed creates made %d sessions, want 1", n)
	}
	do(t, ts, "POST", "/v1/sandboxes/dev/sessions", strings.NewReader(`{}`))
	if n := count(); n != 2 {
		t.Fatalf("an unkeyed create after it: %d sessions, want 2", n)
	}
}

// TestOpenAPIDocumentsKeyRules: api/openapi.yaml gives every mutating
// operation the Idempotency-Key parameter its rule calls for.
func TestOpenAPIDocumentsKeyRules(t *testing.T) {
	b, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		// path → method (or the path's own "parameters") → node
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for pattern, rule := range keyRules {
		method, path, _ := strings.Cut(pattern, " ")
		node, ok := doc.Paths[strings.ReplaceAll(path, "...}", "}")][strings.ToLower(method)]
		if !ok {
			t.Errorf("%s: not in openapi.yaml", pattern)
			continue
		}
		var op struct {
			Parameters []struct {
				Ref  string `yaml:"$ref"`
				Name string `yaml:"name"`
			} `yaml:"parameters"`
		}
		if err := node.Decode(&op); err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		want := "#/components/parameters/IdempotencyKey"
		if rule.reject != "" {
			want += "Refused"
		}
		n := 0
		for _, p := range op.Parameters {
			if p.Ref == want {
				n++
			}
			if strings.HasPrefix(p.Ref, "#/components/parameters/IdempotencyKey") && p.Ref != want || p.Name == api.IdempotencyKeyHeader {
				t.Errorf("%s: openapi.yaml has %s%s, want %s", pattern, p.Ref, p.Name, want)
			}
		}
		if n != 1 {
			t.Errorf("%s: openapi.yaml lists %s %d times, want once", pattern, want, n)
		}
	}
}

package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/membership"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store/sqlite"
)

type infoOf node.Info

func (i infoOf) Info(context.Context) (node.Info, error) { return node.Info(i), nil }

// nodesServer serves the real membership over a SQLite store holding one
// node entry, "n1", with the operator key and a tenant key.
func nodesServer(t *testing.T) (*httptest.Server, *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := membership.New(st, infoOf{Capacity: node.Capacity{VCPU: 2, MemoryMiB: 1024}, Images: []string{"sha256:base"}}, membership.Config{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(newServer(newFake(), Options{APIKey: testKey, Journal: st, Logf: t.Logf,
		Nodes:   membership.NewDirectory(st, st, "n1", 0),
		Tenants: func(k string) (string, bool) { return "team-a", k == "key-of-team-a-0123" }}))
	t.Cleanup(ts.Close)
	return ts, st
}

func TestNodesRoutes(t *testing.T) {
	ts, st := nodesServer(t)
	r := do(t, ts, "GET", "/v1/nodes", nil)
	var list api.NodeList
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if len(list.Nodes) != 1 || list.Nodes[0].Name != "n1" || list.Nodes[0].Health != api.NodeAlive ||
		list.Nodes[0].Capacity.MilliCPU != 2000 || len(list.Nodes[0].Images) != 1 || list.StaleAfterMs != 10000 {
		t.Fatalf("list %+v", list)
	}
	r = do(t, ts, "GET", "/v1/nodes/n1", nil)
	var n api.Node
	if err := json.Unmarshal(r.body, &n); err != nil || r.status != 200 || n.Name != "n1" || n.Epoch != 1 {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path  string
		body  string
		drain bool
	}{{"/v1/nodes/n1/drain", "", true}, {"/v1/nodes/n1/drain", "{}", true}, {"/v1/nodes/n1/undrain", "", false}} {
		r = do(t, ts, "POST", c.path, strings.NewReader(c.body))
		if err := json.Unmarshal(r.body, &n); err != nil || r.status != 200 || n.Draining != c.drain {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
		if got, _ := st.GetNode(context.Background(), "n1"); got.Draining != c.drain {
			t.Fatalf("%s: the store says draining=%v", c.path, got.Draining)
		}
	}
	// Unknown node: 404 on every route; a bad name: 400; an unknown
	// field in the body: 400.
	for _, c := range []struct{ method, path, body, code string }{
		{"GET", "/v1/nodes/nope", "", "not_found"},
		{"POST", "/v1/nodes/nope/drain", "", "not_found"},
		{"POST", "/v1/nodes/nope/undrain", "", "not_found"},
		{"GET", "/v1/nodes/Bad_Name", "", "invalid_argument"},
		{"POST", "/v1/nodes/n1/drain", `{"force":true}`, "invalid_argument"},
	} {
		r := do(t, ts, c.method, c.path, strings.NewReader(c.body))
		if e := r.apiError(t); e.Code != c.code {
			t.Errorf("%s %s: %d %s, want %s", c.method, c.path, r.status, r.body, c.code)
		}
	}
	// The drain is journaled in the node's own stream, not a sandbox's.
	entries, err := st.Journal(context.Background(), "node:n1")
	if err != nil || len(entries) < 3 || entries[0].Op != "drain-node" {
		t.Fatalf("journal: %+v %v", entries, err)
	}
	if e, _ := st.Journal(context.Background(), "n1"); len(e) != 0 {
		t.Fatalf("the drain landed in sandbox n1's journal: %+v", e)
	}
}

// TestNodesAreOperatorOnly: a tenant's key gets 403 on every node route,
// and draining through it changes nothing (the negative control is the
// operator's key above, which does drain).
func TestNodesAreOperatorOnly(t *testing.T) {
	ts, st := nodesServer(t)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/nodes"}, {"GET", "/v1/nodes/n1"}, {"GET", "/v1/nodes/nope"},
		{"POST", "/v1/nodes/n1/drain"}, {"POST", "/v1/nodes/n1/undrain"},
	} {
		r := do(t, ts, c.method, c.path, nil, "Authorization", "Bearer key-of-team-a-0123")
		if r.status != 403 || r.apiError(t).Code != "permission_denied" {
			t.Errorf("tenant %s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	if n, _ := st.GetNode(context.Background(), "n1"); n.Draining {
		t.Fatal("a tenant's drain reached the store")
	}
	if r := do(t, ts, "GET", "/v1/nodes", nil, "Authorization", "Bearer wrong-key-0123456"); r.status != 401 {
		t.Fatalf("unknown key: %d", r.status)
	}
}

// TestNodesIdempotencyKey: a drain retried with its key replays the first
// answer: the node as it was then, even after an undrain.
func TestNodesIdempotencyKey(t *testing.T) {
	ts, _ := nodesServer(t)
	first := do(t, ts, "POST", "/v1/nodes/n1/drain", nil, api.IdempotencyKeyHeader, "k1")
	do(t, ts, "POST", "/v1/nodes/n1/undrain", nil)
	again := do(t, ts, "POST", "/v1/nodes/n1/drain", nil, api.IdempotencyKeyHeader, "k1")
	if first.status != 200 || string(again.body) != string(first.body) {
		t.Fatalf("replay %d %s, first %d %s", again.status, again.body, first.status, first.body)
	}
	var n api.Node
	if r := do(t, ts, "GET", "/v1/nodes/n1", nil); json.Unmarshal(r.body, &n) != nil || n.Draining {
		t.Fatalf("the replay drained again: %s", r.body)
	}
}

func TestNodesWithoutMembership(t *testing.T) {
	ts := httptest.NewServer(newServer(newFake(), Options{APIKey: testKey}))
	defer ts.Close()
	if r := do(t, ts, "GET", "/v1/nodes", nil); r.status != 409 && r.status != 412 {
		t.Fatalf("no membership: %d %s", r.status, r.body)
	}
}

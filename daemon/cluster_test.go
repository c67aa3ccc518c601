package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

func clusterStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// putOwned writes a running sandbox record owned by owner.
func putOwned(t *testing.T, st store.Store, name, owner string) store.Sandbox {
	t.Helper()
	rec := store.Sandbox{Name: name, ID: "s" + name, State: api.StateRunning, Owner: owner, OwnerEpoch: 1, IP: "10.0.0.2"}
	v, err := st.Put(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = v
	return rec
}

// TestOwnerDownTakesOverOnlyDeadOwners: a sandbox whose owner cannot be
// reached moves here only when the owner's heartbeat is older than the
// staleness bound (or it has no entry), and only to a member that runs
// sandboxes; the record then names this node with the next epoch, asleep.
// Negative control: a live owner that merely failed one connection keeps
// its sandbox, untouched.
func TestOwnerDownTakesOverOnlyDeadOwners(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	if _, err := st.PutNode(ctx, store.Node{Name: "n2", Addr: "http://127.0.0.1:1", Roles: []string{"control", "node"}, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	before := putOwned(t, st, "v", "n2")
	w := &clusterWiring{self: "n1", isNode: true, st: st, stale: time.Hour, logf: t.Logf}
	down := forward.Down{Sandbox: "v", Node: "n2", Cause: io.ErrUnexpectedEOF}

	local, err := w.ownerDown(ctx, down)
	if local || !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "not dead") {
		t.Fatalf("live owner: local=%v err=%v, want 503 naming it not dead", local, err)
	}
	if got, _ := st.Get(ctx, "v"); got.Owner != "n2" || got.Version != before.Version {
		t.Fatalf("live owner's record changed: %+v", got)
	}

	ctl := &clusterWiring{self: "c1", isNode: false, st: st, stale: time.Nanosecond, logf: t.Logf}
	time.Sleep(5 * time.Millisecond)
	if local, err := ctl.ownerDown(ctx, down); local || !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("control-only member: local=%v err=%v, want 503", local, err)
	}

	w.stale = time.Nanosecond
	local, err = w.ownerDown(ctx, down)
	if !local || err != nil {
		t.Fatalf("dead owner: local=%v err=%v, want a takeover", local, err)
	}
	got, err := st.Get(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "n1" || got.OwnerEpoch != before.OwnerEpoch+1 || got.State != api.StateSleeping || got.IP != "" {
		t.Fatalf("after takeover: owner %q epoch %d state %s ip %q", got.Owner, got.OwnerEpoch, got.State, got.IP)
	}
	j, _ := st.Journal(ctx, "v")
	if len(j) == 0 || j[len(j)-1].Op != "takeover" {
		t.Fatalf("journal has no takeover entry: %+v", j)
	}

	// An owner with no entry at all is dead too.
	putOwned(t, st, "w", "gone")
	if local, err := w.ownerDown(ctx, forward.Down{Sandbox: "w", Node: "gone", Cause: io.EOF}); !local || err != nil {
		t.Fatalf("owner without entry: local=%v err=%v", local, err)
	}
}

// TestOwnsAlarmsWhereTheObjectLives: a sandbox's alarms are this node's
// only when it owns the sandbox; any other object's belong to whichever
// member took its lease first.
func TestOwnsAlarmsWhereTheObjectLives(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	putOwned(t, st, "mine", "n1")
	putOwned(t, st, "theirs", "n2")
	n1 := &clusterWiring{self: "n1", isNode: true, st: st, stale: time.Minute, logf: t.Logf}
	n2 := &clusterWiring{self: "n2", isNode: true, st: st, stale: time.Minute, logf: t.Logf}
	for _, c := range []struct {
		w    *clusterWiring
		addr durable.Address
		want bool
	}{
		{n1, durable.Address{Class: durable.BuiltinSandboxClass, ID: "mine"}, true},
		{n1, durable.Address{Class: durable.BuiltinSandboxClass, ID: "theirs"}, false},
		{n2, durable.Address{Class: durable.BuiltinSandboxClass, ID: "theirs"}, true},
		{n1, durable.Address{Class: "counter", ID: "a"}, true}, // first to ask takes the lease
		{n2, durable.Address{Class: "counter", ID: "a"}, false},
		{n1, durable.Address{Class: "counter", ID: "a"}, true}, // renewal
		{n2, durable.Address{Class: durable.BuiltinSandboxClass, ID: "destroyed"}, true},
		{n1, durable.Address{Class: durable.BuiltinSandboxClass, ID: "destroyed"}, false},
	} {
		got, err := c.w.owns(ctx, c.addr)
		if err != nil || got != c.want {
			t.Errorf("%s owns %v: %v %v, want %v", c.w.self, c.addr, got, err, c.want)
		}
	}
}

// TestAdvertisedNodeURL: a listener on one address advertises itself; one
// on every interface needs --node-advertise.
func TestAdvertisedNodeURL(t *testing.T) {
	c := NodeAPIConfig{Listen: "10.0.0.1:7071"}
	if got, err := c.advertisedNodeURL("http://10.0.0.1:7071"); err != nil || got != "http://10.0.0.1:7071" {
		t.Fatalf("got %q %v", got, err)
	}
	c.Listen = "0.0.0.0:7071"
	if _, err := c.advertisedNodeURL("http://0.0.0.0:7071"); err == nil || !strings.Contains(err.Error(), "--node-advertise") {
		t.Fatalf("every interface: %v, want a request for --node-advertise", err)
	}
	c.Advertise = "https://node-1.internal:7071"
	if got, err := c.advertisedNodeURL("http://0.0.0.0:7071"); err != nil || got != c.Advertise {
		t.Fatalf("advertised: %q %v", got, err)
	}
	c.Advertise = "node-1:7071"
	if _, err := c.advertisedNodeURL("http://0.0.0.0:7071"); err == nil {
		t.Fatal("an advertised address without a scheme was taken")
	}
}

type countRT struct{ n int }

func (c *countRT) RoundTrip(*http.Request) (*http.Response, error) {
	c.n++
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// TestClearGuard: the cluster credential never goes in plain HTTP beyond
// loopback unless the operator said the network is trusted.
func TestClearGuard(t *testing.T) {
	for _, c := range []struct {
		url      string
		insecure bool
		sent     bool
	}{
		{"http://127.0.0.1:7071/x", false, true},
		{"http://10.0.0.2:7071/x", false, false},
		{"http://10.0.0.2:7071/x", true, true},
		{"https://10.0.0.2:7071/x", false, true},
	} {
		rt := &countRT{}
		req, _ := http.NewRequest(http.MethodGet, c.url, nil)
		_, err := clearGuard{rt: rt, insecure: c.insecure}.RoundTrip(req)
		if (rt.n == 1) != c.sent || (err == nil) != c.sent {
			t.Errorf("%s insecure=%v: sent %d, err %v; want sent %v", c.url, c.insecure, rt.n, err, c.sent)
		}
	}
}

// TestCheckCluster: a cluster member that runs sandboxes must serve the
// node API (others forward to it); a control-only one need not.
func TestCheckCluster(t *testing.T) {
	c := Config{Cluster: "postgres://x", Member: NodeConfig{Role: "all"}}
	if err := c.checkCluster(); err == nil || !strings.Contains(err.Error(), "--node-listen") {
		t.Fatalf("node without --node-listen: %v", err)
	}
	c.Member.Role = "control"
	if err := c.checkCluster(); err != nil {
		t.Fatalf("control-only: %v", err)
	}
	if err := (Config{}).checkCluster(); err != nil {
		t.Fatalf("single host: %v", err)
	}
}

// TestStoreGate: while the heartbeat has not gone out for longer than the
// staleness bound every request but health is refused at once with 503
// naming the member; within it they pass. Negative control: the same
// requests pass when the heartbeat is fresh.
func TestStoreGate(t *testing.T) {
	var since time.Duration
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	g := storeGate(next, "n1", func() time.Duration { return since }, 5*time.Second)
	for _, c := range []struct {
		since time.Duration
		path  string
		want  int
	}{
		{time.Second, "/v1/sandboxes", http.StatusNoContent},
		{6 * time.Second, "/v1/sandboxes", http.StatusServiceUnavailable},
		{6 * time.Second, "/sandboxes", http.StatusServiceUnavailable},
		{6 * time.Second, "/v1/health", http.StatusNoContent},
	} {
		since = c.since
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != c.want {
			t.Errorf("since %s %s: %d, want %d", c.since, c.path, rec.Code, c.want)
		}
		if rec.Code == http.StatusServiceUnavailable && !strings.Contains(rec.Body.String(), `member \"n1\"`) {
			t.Errorf("refusal does not name the member: %s", rec.Body)
		}
	}
}

// TestObjectHolderEvictsWhenTheLeaseComesBack: the first member to call an
// object takes its lease and serves it; the others see it as the holder.
// When the lease lapses and another member takes it, and it later comes
// back, the first member drops its in-memory instance before serving
// (another member wrote to the object's storage in between). Negative
// control: a renewal at the same epoch evicts nothing.
func TestObjectHolderEvictsWhenTheLeaseComesBack(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	var evicted []durable.Address
	n1 := &clusterWiring{self: "n1", isNode: true, st: st, stale: 50 * time.Millisecond, logf: t.Logf,
		evict: func(a durable.Address) { evicted = append(evicted, a) }}
	n2 := &clusterWiring{self: "n2", isNode: true, st: st, stale: 50 * time.Millisecond, logf: t.Logf}
	holder := func(w *clusterWiring) string {
		t.Helper()
		h, err := w.objectHolder(ctx, "Counter", "a")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := holder(n1); h != "n1" {
		t.Fatalf("first call through n1: holder %q", h)
	}
	if h := holder(n2); h != "n1" {
		t.Fatalf("call through n2 while n1 holds it: holder %q", h)
	}
	if h := holder(n1); h != "n1" || len(evicted) != 0 {
		t.Fatalf("renewal: holder %q, evicted %v (want none)", h, evicted)
	}
	time.Sleep(80 * time.Millisecond) // n1's lease lapses
	if h := holder(n2); h != "n2" {
		t.Fatalf("after the lapse n2 takes it: holder %q", h)
	}
	time.Sleep(80 * time.Millisecond)
	if h := holder(n1); h != "n1" {
		t.Fatalf("back to n1: holder %q", h)
	}
	if len(evicted) != 1 || evicted[0] != (durable.Address{Class: "Counter", ID: "a"}) {
		t.Fatalf("evicted %v, want Counter/a once", evicted)
	}
}

// TestUserNSBaseBound: a base that leaves no 65536-id range below 2^31 is
// refused at start (it would have had no ranges, or, above 2^31, a count
// that wrapped around); one just below the bound is taken.
func TestUserNSBaseBound(t *testing.T) {
	for _, c := range []struct {
		base uint32
		ok   bool
	}{
		{1 << 31, false},
		{1<<31 + 5<<24, false},
		{1<<31 - 100, false},
		{1<<31 - 1<<16, true},
	} {
		cfg := Config{UserNSBase: c.base, Runtime: "/bin/true", AgentBinary: "/bin/true"}
		err := cfg.defaults()
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--userns-base")) {
			t.Errorf("base %d: %v, want ok=%v", c.base, err, c.ok)
		}
	}
}

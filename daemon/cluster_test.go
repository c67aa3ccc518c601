package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// placeOn is a forward.Placer that always answers node (or err), and
// records what it was asked.
type placeOn struct {
	node  string
	err   error
	asked []api.CreateSandboxRequest
}

func (p *placeOn) Place(_ context.Context, req api.CreateSandboxRequest) (string, error) {
	p.asked = append(p.asked, req)
	return p.node, p.err
}

// TestOwnerDownTakesOverWherePlacementSays: a dead owner's sandbox moves
// to the node placement chooses, not to the member the request reached;
// that member routes the request there (forward.ErrTakenOver), even when it
// runs no sandboxes itself. A record another member moved meanwhile is not
// written again, and placement's refusal is a 503 that leaves the record
// alone. Control: placement choosing this member serves it here.
func TestOwnerDownTakesOverWherePlacementSays(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	pl := &placeOn{node: "n3"}
	ctl := &clusterWiring{self: "c1", isNode: false, st: st, stale: time.Nanosecond, logf: t.Logf, placer: pl}
	before := putOwned(t, st, "p", "dead")
	time.Sleep(2 * time.Millisecond)
	local, err := ctl.ownerDown(ctx, forward.Down{Sandbox: "p", Node: "dead", Cause: io.EOF})
	if local || !errors.Is(err, forward.ErrTakenOver) || !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("control member, placement says n3: local=%v err=%v, want a reroute", local, err)
	}
	got, _ := st.Get(ctx, "p")
	if got.Owner != "n3" || got.OwnerEpoch != before.OwnerEpoch+1 || got.State != api.StateSleeping {
		t.Fatalf("after the takeover: %+v, want n3 at the next epoch, asleep", got)
	}
	if len(pl.asked) != 1 || pl.asked[0].Name != "p" {
		t.Fatalf("placement asked %+v", pl.asked)
	}
	j, _ := st.Journal(ctx, "p")
	if len(j) == 0 || j[len(j)-1].Op != "takeover" || !strings.Contains(j[len(j)-1].Detail, "to n3 (chosen by c1)") {
		t.Fatalf("journal: %+v", j)
	}

	// Another member already moved it (the request read the old owner):
	// routed again, the record untouched, placement not asked.
	v := got.Version
	local, err = ctl.ownerDown(ctx, forward.Down{Sandbox: "p", Node: "dead", Cause: io.EOF})
	if local || !errors.Is(err, forward.ErrTakenOver) {
		t.Fatalf("moved meanwhile: local=%v err=%v", local, err)
	}
	if got, _ := st.Get(ctx, "p"); got.Version != v || got.Owner != "n3" || len(pl.asked) != 1 {
		t.Fatalf("moved meanwhile: record %+v, placement asked %d times", got, len(pl.asked))
	}

	// Placement finds no room: 503, record unchanged.
	putOwned(t, st, "q", "dead")
	pl.err = errdefs.ResourceExhausted("every node is full")
	local, err = ctl.ownerDown(ctx, forward.Down{Sandbox: "q", Node: "dead", Cause: io.EOF})
	if local || errors.Is(err, forward.ErrTakenOver) || !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "every node is full") {
		t.Fatalf("no room: local=%v err=%v, want 503 with placement's reason", local, err)
	}
	if got, _ := st.Get(ctx, "q"); got.Owner != "dead" {
		t.Fatalf("no room: the record moved to %q", got.Owner)
	}

	// Placement picks the dead owner itself (a node list not yet showing
	// it stale): refused, not moved onto the dead node.
	pl.err, pl.node = nil, "dead"
	if local, err := ctl.ownerDown(ctx, forward.Down{Sandbox: "q", Node: "dead", Cause: io.EOF}); local || err == nil || errors.Is(err, forward.ErrTakenOver) {
		t.Fatalf("placement chose the dead node: local=%v err=%v", local, err)
	}

	// Control: placement chooses the member the request reached.
	n1 := &clusterWiring{self: "n1", isNode: true, st: st, stale: time.Nanosecond, logf: t.Logf, placer: &placeOn{node: "n1"}}
	if local, err := n1.ownerDown(ctx, forward.Down{Sandbox: "q", Node: "dead", Cause: io.EOF}); !local || err != nil {
		t.Fatalf("placement chose n1: local=%v err=%v, want served here", local, err)
	}
	if got, _ := st.Get(ctx, "q"); got.Owner != "n1" {
		t.Fatalf("placement chose n1: owner %q", got.Owner)
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
	g := storeGate(next, newStaleWatch("n1", func() time.Duration { return since }, 5*time.Second))
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

// TestStoreGateEndsRequestsInFlight: a request that passed the gate while
// the member was fresh and is still waiting (on the store, say) when the
// member turns stale has its context cancelled then, with errStale as the
// cause; the gate answers 503 naming the member when the handler wrote
// nothing, and leaves the handler's own answer alone when it wrote one.
// Once the heartbeat is fresh again a new request is not cancelled.
// Negative control: while the member stays fresh the waiting request is
// not cancelled.
func TestStoreGateEndsRequestsInFlight(t *testing.T) {
	var mu sync.Mutex
	since := time.Duration(0)
	setSince := func(d time.Duration) { mu.Lock(); since = d; mu.Unlock() }
	watch := newStaleWatch("n1", func() time.Duration { mu.Lock(); defer mu.Unlock(); return since }, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watch.run(ctx)

	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var cause atomic.Value
	wait := func(answer bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			select {
			case <-r.Context().Done():
				cause.Store(context.Cause(r.Context()))
				if answer {
					w.WriteHeader(http.StatusTeapot)
				}
			case <-release:
				w.WriteHeader(http.StatusNoContent)
			}
		})
	}
	serve := func(h http.Handler) chan *httptest.ResponseRecorder {
		out := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			rec := httptest.NewRecorder()
			storeGate(h, watch).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sandboxes", nil))
			out <- rec
		}()
		<-entered
		return out
	}

	// Control: fresh all along, the request waits until released.
	done := serve(wait(false))
	select {
	case rec := <-done:
		t.Fatalf("a fresh member's request ended by itself: %d %s", rec.Code, rec.Body)
	case <-time.After(20 * staleCheckEvery(time.Second)):
	}
	close(release)
	if rec := <-done; rec.Code != http.StatusNoContent {
		t.Fatalf("released: %d", rec.Code)
	}
	release = make(chan struct{})

	// The member turns stale while the request waits: 503 from the gate.
	done = serve(wait(false))
	setSince(2 * time.Second)
	rec := <-done
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `member \"n1\"`) {
		t.Fatalf("in flight when stale: %d %s, want 503 naming n1", rec.Code, rec.Body)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, errStale) {
		t.Fatalf("cause %v, want errStale", c)
	}

	// Fresh again: a new request passes; then stale while a handler that
	// answers for itself waits: its answer stands.
	setSince(0)
	done = serve(wait(true))
	setSince(2 * time.Second)
	if rec := <-done; rec.Code != http.StatusTeapot {
		t.Fatalf("the handler's own answer was replaced: %d %s", rec.Code, rec.Body)
	}
	setSince(0)
}

// failRenew is a store whose lease renewals fail as an unreachable
// server's would.
type failRenew struct{ stateStore }

func (failRenew) RenewLease(context.Context, store.Lease, time.Duration) (store.Lease, error) {
	return store.Lease{}, errdefs.Unavailable("the store is away")
}

// TestObjectLeaseFollowsTheInstance: an object lease is renewed while its
// instance is in memory here, so another member cannot take it past the
// TTL (negative control: once the instance left memory the lease is not
// renewed and another member takes it after the TTL). When a renewal is
// refused because another member holds the lease, or cannot be made
// before the lease lapses, the instance here is evicted; not before.
func TestObjectLeaseFollowsTheInstance(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	const ttl = 200 * time.Millisecond
	var mu sync.Mutex
	resident := map[string]bool{}
	var evicted []string
	n1 := &clusterWiring{self: "n1", isNode: true, st: st, stale: ttl, logf: t.Logf,
		resident: func(a durable.Address) bool { mu.Lock(); defer mu.Unlock(); return resident[a.ID] },
		evict: func(a durable.Address) {
			mu.Lock()
			evicted = append(evicted, a.ID)
			resident[a.ID] = false
			mu.Unlock()
		}}
	n2 := &clusterWiring{self: "n2", isNode: true, st: st, stale: ttl, logf: t.Logf}
	holder := func(w *clusterWiring, id string) string {
		t.Helper()
		h, err := w.objectHolder(ctx, "Counter", id)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	renewFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(leaseRenewEvery(ttl)) {
			n1.renewLeases(ctx)
		}
	}
	setResident := func(id string, v bool) { mu.Lock(); resident[id] = v; mu.Unlock() }

	// Resident: renewed past three TTLs, n2 never gets it.
	if holder(n1, "a") != "n1" {
		t.Fatal("n1 did not take a free lease")
	}
	setResident("a", true)
	renewFor(3 * ttl)
	if h := holder(n2, "a"); h != "n1" {
		t.Fatalf("a resident object's lease moved to %q", h)
	}
	// Negative control: not resident, not renewed; n2 takes it after the TTL.
	setResident("a", false)
	renewFor(ttl + 50*time.Millisecond)
	if h := holder(n2, "a"); h != "n2" {
		t.Fatalf("an object out of memory kept its lease on %q", h)
	}
	if len(evicted) != 0 {
		t.Fatalf("evicted %v, want none yet", evicted)
	}

	// Taken by another member while resident here (n1 did not renew in
	// time): the next renewal is refused and evicts at once.
	if holder(n1, "b") != "n1" {
		t.Fatal("n1 did not take b")
	}
	setResident("b", true)
	time.Sleep(ttl + 50*time.Millisecond)
	if h := holder(n2, "b"); h != "n2" {
		t.Fatalf("b after the lapse: %q", h)
	}
	if got := n1.renewLeases(ctx); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("renewal of a lease n2 took evicted %v, want b", got)
	}

	// The store is away: kept while the lease holds, evicted once it lapses.
	if holder(n1, "c") != "n1" {
		t.Fatal("n1 did not take c")
	}
	setResident("c", true)
	n1.st = failRenew{st}
	if got := n1.renewLeases(ctx); len(got) != 0 {
		t.Fatalf("a failed renewal before the lapse evicted %v", got)
	}
	time.Sleep(ttl + 10*time.Millisecond)
	if got := n1.renewLeases(ctx); len(got) != 1 || got[0].ID != "c" {
		t.Fatalf("after the lapse unrenewed evicted %v, want c", got)
	}
	if fmt.Sprint(evicted) != "[b c]" {
		t.Fatalf("evicted %v, want [b c]", evicted)
	}
}

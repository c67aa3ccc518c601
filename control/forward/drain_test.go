package forward_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/store"
)

// mover is a Mover over the cluster's store that moves to a fixed node
// with store.TakeoverSleeping and records what it was asked.
type mover struct {
	c     *cluster
	to    string
	fail  error                                 // returned instead of moving
	first func(rec store.Sandbox) store.Sandbox // runs before the first move (a racing writer)
	mu    sync.Mutex
	asked []string
}

func (m *mover) Move(ctx context.Context, rec store.Sandbox) (string, error) {
	m.mu.Lock()
	m.asked = append(m.asked, rec.Name)
	race := m.first
	m.first = nil
	m.mu.Unlock()
	if m.fail != nil {
		return "", m.fail
	}
	if race != nil {
		race(rec)
	}
	if _, err := store.TakeoverSleeping(ctx, m.c.st, rec, rec.Owner, m.to); err != nil {
		return "", err
	}
	return m.to, nil
}

func (m *mover) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.asked...)
}

// ownIn writes sandbox name's record owned by owner in state.
func (c *cluster) ownIn(name, owner, state string) store.Sandbox {
	c.t.Helper()
	c.own(name, owner)
	ctx := context.Background()
	rec, err := c.st.Get(ctx, name)
	if err != nil {
		c.t.Fatal(err)
	}
	rec.State, rec.OwnerEpoch = state, 1
	if rec.Version, err = c.st.Put(ctx, rec); err != nil {
		c.t.Fatal(err)
	}
	return rec
}

func (c *cluster) drain(name string, on bool) {
	c.t.Helper()
	if err := c.st.SetNodeDraining(context.Background(), name, on); err != nil {
		c.t.Fatal(err)
	}
}

// get is one request for sandbox name at node at; it returns who served it.
func (c *cluster) get(at, name string) seen {
	c.t.Helper()
	resp, b := do(c.t, "GET", c.nodes[at].user.URL+"/sb/"+name+"/exec", "Authorization", "Bearer key-t")
	return decodeSeen(c.t, resp, b)
}

// TestDrainMovesSleeping: a request made at n1 for a sleeping sandbox of
// draining n2 moves it (n1 owns it, the next epoch) and is served at n1;
// a running sandbox of the same draining node is proxied to it untouched.
// Negative control: the same sleeping sandbox on a node that is not
// draining is proxied, and the Mover is never asked.
func TestDrainMovesSleeping(t *testing.T) {
	c := newCluster(t)
	m := &mover{c: c, to: "n1"}
	c.add("n1", forward.Config{Mover: m})
	n2 := c.add("n2", forward.Config{})
	ctx := context.Background()

	// Not draining: proxied, never moved.
	ctl := c.ownIn("ctl", "n2", api.StateSleeping)
	if s := c.get("n1", "ctl"); s.Node != "n2" || !s.Forwarded {
		t.Fatalf("sleeping sandbox of a node that is not draining: served by %+v, want n2", s)
	}
	if got, _ := c.st.Get(ctx, "ctl"); got.Owner != "n2" || got.Version != ctl.Version || len(m.calls()) != 0 {
		t.Fatalf("not draining: record %+v, mover asked %v", got, m.calls())
	}

	c.drain("n2", true)
	before := c.ownIn("sl", "n2", api.StateSleeping)
	running := c.ownIn("run", "n2", api.StateRunning)
	if s := c.get("n1", "sl"); s.Node != "n1" || s.Forwarded {
		t.Fatalf("sleeping sandbox of a draining node: served by %+v, want n1 locally", s)
	}
	got, err := c.st.Get(ctx, "sl")
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "n1" || got.OwnerEpoch != before.OwnerEpoch+1 || got.State != api.StateSleeping {
		t.Fatalf("after the move: %+v", got)
	}
	if s := c.get("n1", "run"); s.Node != "n2" || !s.Forwarded {
		t.Fatalf("running sandbox of a draining node: served by %+v, want n2 (it moves once slept)", s)
	}
	if got, _ := c.st.Get(ctx, "run"); got.Owner != "n2" || got.Version != running.Version {
		t.Fatalf("running sandbox was touched: %+v", got)
	}
	if calls := m.calls(); len(calls) != 1 || calls[0] != "sl" {
		t.Fatalf("mover asked for %v, want [sl]", calls)
	}
	// The moved sandbox is n1's now: the next request is plain local.
	if s := c.get("n1", "sl"); s.Node != "n1" || len(m.calls()) != 1 {
		t.Fatalf("second request: %+v (mover asked %v)", s, m.calls())
	}
	// Undrained: proxied again.
	c.drain("n2", false)
	c.ownIn("sl2", "n2", api.StateSleeping)
	if s := c.get("n1", "sl2"); s.Node != "n2" {
		t.Fatalf("after undrain: served by %+v, want n2", s)
	}
	if n2.served.Load() != 3 {
		t.Fatalf("n2 served %d requests, want 3 (ctl, run, sl2)", n2.served.Load())
	}
}

// TestDrainMoveElsewhere: a Mover that chose another node (placement, at a
// control-only entry) has the request proxied to that node.
func TestDrainMoveElsewhere(t *testing.T) {
	c := newCluster(t)
	m := &mover{c: c, to: "n3"}
	c.add("n1", forward.Config{Mover: m})
	c.add("n2", forward.Config{})
	c.add("n3", forward.Config{})
	c.drain("n2", true)
	c.ownIn("a", "n2", api.StateSleeping)
	if s := c.get("n1", "a"); s.Node != "n3" || s.Entry != "n1" {
		t.Fatalf("served by %+v, want n3 through n1", s)
	}
	if got, _ := c.st.Get(context.Background(), "a"); got.Owner != "n3" {
		t.Fatalf("owner %q, want n3", got.Owner)
	}
}

// TestDrainMoveRaces: a sandbox that woke on its owner between the read
// and the move stays there (the conditional move fails, the record is read
// again and the running sandbox is proxied); a Mover that fails otherwise
// leaves the request to the owner; a forwarded request never moves.
func TestDrainMoveRaces(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	m := &mover{c: c, to: "n1"}
	c.add("n1", forward.Config{Mover: m})
	m2 := &mover{c: c, to: "n3"}
	c.add("n2", forward.Config{Mover: m2})
	c.add("n3", forward.Config{})
	c.drain("n2", true)

	c.ownIn("woke", "n2", api.StateSleeping)
	m.first = func(rec store.Sandbox) store.Sandbox {
		rec.State = api.StateRunning // the owner woke it
		v, err := c.st.Put(ctx, rec)
		if err != nil {
			t.Error(err)
		}
		rec.Version = v
		return rec
	}
	if s := c.get("n1", "woke"); s.Node != "n2" {
		t.Fatalf("sandbox that woke during the move: served by %+v, want its owner n2", s)
	}
	if got, _ := c.st.Get(ctx, "woke"); got.Owner != "n2" || got.State != api.StateRunning {
		t.Fatalf("the losing move wrote: %+v", got)
	}

	m.fail = errors.New("no node has room")
	c.ownIn("stuck", "n2", api.StateSleeping)
	if s := c.get("n1", "stuck"); s.Node != "n2" {
		t.Fatalf("move that failed: served by %+v, want the owner n2", s)
	}
	if got, _ := c.st.Get(ctx, "stuck"); got.Owner != "n2" {
		t.Fatalf("failed move changed the owner: %+v", got)
	}
	// n2 received forwarded requests for its sleeping "stuck" and served
	// them itself: its own Mover was never asked for them.
	if len(m2.calls()) != 0 {
		t.Fatalf("n2's mover asked for forwarded requests: %v", m2.calls())
	}

	// A request made at the draining node itself moves its own sleeping
	// sandbox (to n3 here) and is proxied there.
	c.ownIn("own", "n2", api.StateSleeping)
	if s := c.get("n2", "own"); s.Node != "n3" || s.Entry != "n2" {
		t.Fatalf("own sleeping sandbox at the draining node: served by %+v, want n3", s)
	}
	if calls := m2.calls(); len(calls) != 1 || calls[0] != "own" {
		t.Fatalf("n2's mover asked for %v, want [own]", calls)
	}
}

// staleFirst is Records that answers the first Get for a name with the
// record as it was before (running), then the store's: the entry read the
// sandbox running and the drain slept it before the owner served the
// request.
type staleFirst struct {
	forward.Records
	mu   sync.Mutex
	seen map[string]bool
}

func (s *staleFirst) Get(ctx context.Context, name string) (store.Sandbox, error) {
	rec, err := s.Records.Get(ctx, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if err == nil && !s.seen[name] {
		s.seen[name] = true
		rec.State = api.StateRunning
	}
	return rec, err
}

// TestDrainOwnerRefusesReplayable: a request the entry proxied to a
// draining owner for a sandbox it read running, which the owner finds
// asleep, is refused by the owner (it would wake it on a node that is
// being emptied) and the entry moves the sandbox and serves it, with the
// whole body. Negative control: a body the entry cannot hold (no length)
// is served by the owner itself, as before.
func TestDrainOwnerRefusesReplayable(t *testing.T) {
	c := newCluster(t)
	m := &mover{c: c, to: "n1"}
	n1 := c.add("n1", forward.Config{Mover: m})
	n1.fwd = forward.New(forward.Config{Self: "n1", Token: clusterToken, Records: &staleFirst{Records: c.st}, Nodes: c.st, Mover: m})
	n2 := c.add("n2", forward.Config{Mover: &mover{c: c, to: "n1"}})
	body := func(n *node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Write([]byte(n.name + ":" + string(b)))
		})
	}
	n1.local, n2.local = body(n1), body(n2)
	c.drain("n2", true)
	post := func(name string, r io.Reader) string {
		t.Helper()
		req, _ := http.NewRequest("POST", n1.user.URL+"/sb/"+name+"/exec", r)
		req.Header.Set("Authorization", "Bearer key-t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", name, resp.StatusCode, b)
		}
		return string(b)
	}

	c.ownIn("a", "n2", api.StateSleeping)
	if got := post("a", strings.NewReader(`{"command":"true"}`)); got != `n1:{"command":"true"}` {
		t.Fatalf("replayable request: answered %q, want n1 with the whole body", got)
	}
	if rec, _ := c.st.Get(context.Background(), "a"); rec.Owner != "n1" || n2.served.Load() != 0 {
		t.Fatalf("owner %q, n2 served %d: want the sandbox moved to n1 and n2 serving nothing", rec.Owner, n2.served.Load())
	}

	c.ownIn("b", "n2", api.StateSleeping)
	if got := post("b", io.MultiReader(strings.NewReader(`{"command":"true"}`))); got != `n2:{"command":"true"}` {
		t.Fatalf("unbounded body: answered %q, want n2 serving it", got)
	}
	if rec, _ := c.st.Get(context.Background(), "b"); rec.Owner != "n2" {
		t.Fatalf("owner %q, want n2", rec.Owner)
	}
}

package forward_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/store"
)

// countingNodes counts the node-entry and clock reads a Forwarder makes.
type countingNodes struct {
	forward.Nodes
	gets, nows atomic.Int64
}

func (n *countingNodes) GetNode(ctx context.Context, name string) (store.Node, error) {
	n.gets.Add(1)
	return n.Nodes.GetNode(ctx, name)
}

func (n *countingNodes) Now(ctx context.Context) (time.Time, error) {
	n.nows.Add(1)
	return n.Nodes.Now(ctx)
}

// entryAt makes node at of c an entry with cfg whose node reads are
// counted.
func (c *cluster) entryAt(at string, cfg forward.Config) *countingNodes {
	cn := &countingNodes{Nodes: c.st}
	cfg.Self, cfg.Token, cfg.Records, cfg.Nodes = at, clusterToken, c.st, cn
	c.nodes[at].fwd = forward.New(cfg)
	return cn
}

// The owner's node entry (and the store's clock) is read once per
// NodeCacheAge, not per request, while the record that names the owner is
// read every time: a moved sandbox still goes to its new owner on the very
// next request. A failed forward drops the entry, and the next request
// reads it again. Negative control: NodeCacheAge < 0 reads the entry on
// every request.
func TestNodeEntryCached(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	// The owner cache too is an hour, not its 2 s default, so that it
	// holds between these requests on a loaded machine.
	cn := c.entryAt("n1", forward.Config{Staleness: time.Hour, NodeCacheAge: time.Hour, OwnerCacheAge: time.Hour})
	url := c.nodes["n1"].user.URL + "/sb/a"
	get := func() (int, seen) {
		t.Helper()
		resp, b := do(t, "GET", url, "Authorization", "Bearer key-t")
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, seen{}
		}
		return resp.StatusCode, decodeSeen(t, resp, b)
	}
	c.own("a", "n2")
	for range 5 {
		if _, s := get(); s.Node != "n2" {
			t.Fatalf("served by %+v, want n2", s)
		}
	}
	if g, n := cn.gets.Load(), cn.nows.Load(); g != 1 || n != 1 {
		t.Fatalf("5 requests read the node entry %d times and the clock %d times, want 1 and 1", g, n)
	}
	// Moved: the next request goes to the new owner.
	c.own("a", "n3")
	if _, s := get(); s.Node != "n3" {
		t.Fatalf("after the move served by %+v, want n3", s)
	}
	c.own("a", "n2")
	if _, s := get(); s.Node != "n2" {
		t.Fatalf("after the move back served by %+v, want n2", s)
	}
	if g := cn.gets.Load(); g != 2 {
		t.Fatalf("node entries read %d times, want 2 (n2 once, n3 once)", g)
	}

	// n2 goes away and comes back at another address: the request that
	// finds it gone fails, drops the entry, and the next one reads the
	// new address.
	n2 := c.nodes["n2"]
	n2.nodeL.Close()
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("n2 gone: status %d, want 503", code)
	}
	// The failed request may have read n2's entry again before it
	// answered 503 (when the owner cache routed its first try, whose
	// failure reroutes it), or not (CI saw both): what counts is that it
	// dropped the entry, so the next request reads the new address.
	failed := cn.gets.Load()
	if failed != 2 && failed != 3 {
		t.Fatalf("node entries read %d times after the failed request, want 2 or 3", failed)
	}
	n2b := c.add("n2", forward.Config{})
	if _, s := get(); s.Node != "n2" || n2b.served.Load() != 1 {
		t.Fatalf("n2 back at a new address: served by %+v (its new listener served %d), want n2", s, n2b.served.Load())
	}
	if g := cn.gets.Load(); g != failed+1 {
		t.Fatalf("node entries read %d times, want %d: the request after the failure reads the entry again", g, failed+1)
	}

	// Negative control: without the cache every request reads the entry.
	off := c.entryAt("n1", forward.Config{Staleness: time.Hour, NodeCacheAge: -1})
	for range 3 {
		if _, s := get(); s.Node != "n2" {
			t.Fatalf("uncached: served by %+v", s)
		}
	}
	if g, n := off.gets.Load(), off.nows.Load(); g != 3 || n != 3 {
		t.Fatalf("uncached: 3 requests read the entry %d and the clock %d times, want 3 and 3", g, n)
	}
}

// A cached entry never calls an owner down: when its heartbeat looks too
// old by the cache (the store's clock at the read plus the time since),
// the entry is read again, and an owner that heartbeated meanwhile is
// served. Only a fresh read answers "down". Negative control: an owner
// whose heartbeat really is too old is refused.
func TestNodeCacheNeverCallsDown(t *testing.T) {
	const stale = 300 * time.Millisecond
	c := newCluster(t, "n1", "n2")
	cn := c.entryAt("n1", forward.Config{Staleness: stale, NodeCacheAge: time.Hour})
	url := c.nodes["n1"].user.URL + "/sb/a"
	c.own("a", "n2")
	if resp, b := do(t, "GET", url, "Authorization", "Bearer key-t"); decodeSeen(t, resp, b).Node != "n2" {
		t.Fatalf("served by %s", b)
	}
	heartbeat := func() {
		t.Helper()
		n, err := c.st.GetNode(context.Background(), "n2")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.st.PutNode(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	// The cached heartbeat ages past the bound; the store's does not.
	time.Sleep(stale / 2)
	heartbeat()
	time.Sleep(stale/2 + 50*time.Millisecond)
	if resp, b := do(t, "GET", url, "Authorization", "Bearer key-t"); resp.StatusCode != http.StatusOK || decodeSeen(t, resp, b).Node != "n2" {
		t.Fatalf("owner alive in the store, stale in the cache: %d %s, want served by n2", resp.StatusCode, b)
	}
	if g := cn.gets.Load(); g != 2 {
		t.Fatalf("node entry read %d times, want 2 (the stale-looking cache read it again)", g)
	}
	// Negative control: no heartbeat past the bound is down.
	time.Sleep(stale + 50*time.Millisecond)
	resp, b := do(t, "GET", url, "Authorization", "Bearer key-t")
	if e := decodeErr(t, resp, b, http.StatusServiceUnavailable); !strings.Contains(e.Message, "heartbeat") {
		t.Fatalf("dead owner: %+v", e)
	}
}

// countingRecords counts the record reads a Forwarder makes.
type countingRecords struct {
	forward.Records
	gets atomic.Int64
}

func (r *countingRecords) Get(ctx context.Context, name string) (store.Sandbox, error) {
	r.gets.Add(1)
	return r.Records.Get(ctx, name)
}

// claimsAll is Records for a node that believes it owns every sandbox: an
// owner that does not check its record (the negative control below).
type claimsAll struct {
	forward.Records
	self string
}

func (r claimsAll) Get(ctx context.Context, name string) (store.Sandbox, error) {
	rec, err := r.Records.Get(ctx, name)
	rec.Owner = r.self
	return rec, err
}

// The entry routes a running sandbox's requests by the owner it last
// proxied to, without reading the record; the owner reads it and refuses
// a sandbox it does not own any more, and the entry reads the record and
// routes again within the same request: after a move the very next
// request is served by the new owner, with its whole body, and the old
// owner serves nothing. A destroyed sandbox is answered as missing. A
// body the entry cannot hold (no length) is never routed by the cache.
// Negative controls: an owner that does not check its record serves the
// moved sandbox (the owner's check is what makes the cache safe), and
// OwnerCacheAge < 0 reads the record on every request.
func TestOwnerCacheRefusedAfterMove(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	recs := &countingRecords{Records: c.st}
	n1 := c.nodes["n1"]
	n1.fwd = forward.New(forward.Config{Self: "n1", Token: clusterToken, Records: recs, Nodes: c.st, OwnerCacheAge: time.Hour})
	body := func(n *node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Write([]byte(n.name + ":" + string(b)))
		})
	}
	for _, n := range c.nodes {
		n.local = body(n)
	}
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
	const cmd = `{"command":"true"}`
	c.own("a", "n2")
	for range 3 {
		if got := post("a", strings.NewReader(cmd)); got != "n2:"+cmd {
			t.Fatalf("answered %q, want n2", got)
		}
	}
	if g := recs.gets.Load(); g != 1 {
		t.Fatalf("3 requests read the record %d times at the entry, want 1", g)
	}
	c.own("a", "n3")
	served2 := c.nodes["n2"].served.Load()
	if got := post("a", strings.NewReader(cmd)); got != "n3:"+cmd {
		t.Fatalf("after the move: answered %q, want n3 with the whole body", got)
	}
	if c.nodes["n2"].served.Load() != served2 {
		t.Fatal("the old owner served the moved sandbox")
	}
	if g := recs.gets.Load(); g != 2 {
		t.Fatalf("record read %d times, want 2 (once more after the refusal)", g)
	}
	// No length: the body cannot be held, so the record is read.
	if got := post("a", io.MultiReader(strings.NewReader(cmd))); got != "n3:"+cmd {
		t.Fatalf("unbounded body: answered %q, want n3", got)
	}
	if g := recs.gets.Load(); g != 3 {
		t.Fatalf("record read %d times, want 3 (the unbounded body read it)", g)
	}
	// Destroyed: the owner refuses, the entry finds no record.
	if err := c.st.Delete(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if got := post("a", strings.NewReader(cmd)); got != "n1:"+cmd {
		t.Fatalf("destroyed: answered %q, want the entry's own answer (missing)", got)
	}

	// Negative control: an owner that does not check serves what moved.
	c.own("b", "n2")
	post("b", strings.NewReader(cmd))
	c.nodes["n2"].fwd = forward.New(forward.Config{Self: "n2", Token: clusterToken, Records: claimsAll{Records: c.st, self: "n2"}, Nodes: c.st})
	c.own("b", "n3")
	if got := post("b", strings.NewReader(cmd)); got != "n2:"+cmd {
		t.Fatalf("unchecking owner: answered %q, want n2 (the stale owner serving: the check is what protects)", got)
	}

	// Negative control: without the cache every request reads the record.
	n1.fwd = forward.New(forward.Config{Self: "n1", Token: clusterToken, Records: recs, Nodes: c.st, OwnerCacheAge: -1})
	c.own("c", "n3")
	before := recs.gets.Load()
	for range 3 {
		post("c", strings.NewReader(cmd))
	}
	if g := recs.gets.Load() - before; g != 3 {
		t.Fatalf("uncached: 3 requests read the record %d times, want 3", g)
	}
}

// A response header the owner's handler did not set as a refusal (a
// sandbox app behind a preview can set any header) does not make the
// entry send a cached request again: the refusal must echo the request's
// nonce, which handlers never see. The app is called once and its header
// never reaches the client. Control: the owner's real refusal (the
// sandbox moved) is still honoured.
func TestOwnerCacheAppCannotReroute(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	var calls atomic.Int64
	c.nodes["n2"].local = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("X-Berth-Forward-Rerouted", "1")
		w.Write([]byte("app"))
	})
	c.own("a", "n2")
	url := c.nodes["n1"].user.URL + "/sb/a"
	for i := range 3 { // the first fills the cache, the others use it
		resp, b := do(t, "POST", url, "Authorization", "Bearer key-t")
		if resp.StatusCode != 200 || string(b) != "app" || resp.Header.Get("X-Berth-Forward-Rerouted") != "" {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, b, resp.Header)
		}
		if calls.Load() != int64(i+1) {
			t.Fatalf("request %d: the app was called %d times, want %d", i, calls.Load(), i+1)
		}
	}
	c.own("a", "n3")
	resp, b := do(t, "POST", url, "Authorization", "Bearer key-t")
	if s := decodeSeen(t, resp, b); s.Node != "n3" || calls.Load() != 3 {
		t.Fatalf("after the move: %+v, app calls %d", s, calls.Load())
	}
}

// The drain refusal counts only with the request's nonce, too: an app that
// sets X-Berth-Forward-Moving on its answer to a resendable request is
// served once and its header never reaches the client. The negative
// control is TestDrainOwnerRefusesReplayable, whose owner refusal echoes
// it (without the nonce check this test fails: the app is called again).
func TestAppCannotFakeMoving(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	var calls atomic.Int64
	c.nodes["n2"].local = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("X-Berth-Forward-Moving", "1")
		w.Write([]byte("app"))
	})
	c.own("a", "n2")
	url := c.nodes["n1"].user.URL + "/sb/a"
	for i := range 3 {
		resp, b := do(t, "POST", url, "Authorization", "Bearer key-t")
		if resp.StatusCode != 200 || string(b) != "app" || resp.Header.Get("X-Berth-Forward-Moving") != "" {
			t.Fatalf("request %d: %d %q %v", i, resp.StatusCode, b, resp.Header)
		}
		if calls.Load() != int64(i+1) {
			t.Fatalf("request %d: the app was called %d times, want %d", i, calls.Load(), i+1)
		}
	}
}

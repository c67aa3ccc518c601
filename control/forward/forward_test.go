package forward_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/reqinfo"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

const clusterToken = "cluster-secret-token"

// node is one berth process of the test cluster: a user listener whose
// face authenticates "Bearer key-<tenant>" and asks the Forwarder, and a
// node listener with the Receiver in front of the same face.
type node struct {
	name   string
	fwd    *forward.Forwarder
	user   *httptest.Server
	nodeL  *httptest.Server
	served atomic.Int64 // requests the local handler served
	local  http.Handler // what a local request gets; default: echo
}

// seen is what the echo handler reports about the request it served.
type seen struct {
	Node, Tenant, Host, Auth, APIKey, RequestID, Path, Query string
	Forwarded                                                bool
	Entry                                                    string
	Leaked                                                   []string // forwarding headers that reached the handler
}

func (n *node) echo(w http.ResponseWriter, r *http.Request) {
	id, fwd := forward.From(r.Context())
	var leaked []string
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-berth-forward-") {
			leaked = append(leaked, k)
		}
	}
	json.NewEncoder(w).Encode(seen{
		Node: n.name, Tenant: policy.TenantFrom(r.Context()), Host: r.Host, Auth: r.Header.Get("Authorization"),
		APIKey: r.Header.Get("X-Api-Key"), RequestID: r.Header.Get(reqinfo.Header), Path: r.URL.Path,
		Query: r.URL.RawQuery, Forwarded: fwd, Entry: id.Entry, Leaked: leaked,
	})
}

// face is a minimal API face: authenticate (or take the forwarded
// identity), route /sb/{name}/..., then serve locally.
func (n *node) face(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if id, ok := forward.From(ctx); ok {
		ctx = policy.WithTenant(ctx, id.Tenant)
	} else {
		forward.StripHeaders(r.Header)
		t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer key-")
		if !ok {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		ctx = policy.WithTenant(ctx, t)
	}
	r = r.WithContext(reqinfo.With(ctx, &reqinfo.Info{ID: "req_fixed" + n.name}))
	var out forward.Outcome
	var err error
	if rest, ok := strings.CutPrefix(r.URL.Path, "/obj/"); ok {
		class, id, _ := strings.Cut(rest, "/")
		out, err = n.fwd.Object(w, r, class, id, forward.Route{Face: forward.API})
	} else {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/sb/"), "/")
		out, err = n.fwd.Sandbox(w, r, name, forward.Route{Face: forward.API, KeepAuthorization: r.Header.Get("X-Keep") == "1"})
	}
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(api.HTTPStatus(err))
		json.NewEncoder(w).Encode(api.ErrorBody(err))
		return
	}
	if out == forward.Proxied {
		return
	}
	n.served.Add(1)
	n.local.ServeHTTP(w, r)
}

type cluster struct {
	t     *testing.T
	st    *sqlite.Store
	nodes map[string]*node
}

func newCluster(t *testing.T, names ...string) *cluster {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &cluster{t: t, st: st, nodes: map[string]*node{}}
	for _, name := range names {
		c.add(name, forward.Config{})
	}
	return c
}

func (c *cluster) add(name string, cfg forward.Config) *node {
	n := &node{name: name}
	n.local = http.HandlerFunc(n.echo)
	cfg.Self, cfg.Token, cfg.Records, cfg.Nodes = name, clusterToken, c.st, c.st
	n.fwd = forward.New(cfg)
	n.user = httptest.NewServer(http.HandlerFunc(n.face))
	c.t.Cleanup(n.user.Close)
	n.nodeL = httptest.NewServer(forward.NewReceiver(forward.ReceiverConfig{Token: clusterToken, API: http.HandlerFunc(n.face)}))
	c.t.Cleanup(n.nodeL.Close)
	if _, err := c.st.PutNode(context.Background(), store.Node{Name: name, Addr: n.nodeL.URL, StartedAt: time.Now()}); err != nil {
		c.t.Fatal(err)
	}
	c.nodes[name] = n
	return n
}

// own writes (or moves) sandbox name's record to owner.
func (c *cluster) own(name, owner string) {
	c.t.Helper()
	ctx := context.Background()
	sb, err := c.st.Get(ctx, name)
	if err != nil {
		sb = store.Sandbox{Name: name, ID: "id-" + name, State: api.StateRunning}
	}
	sb.Owner = owner
	if _, err := c.st.Put(ctx, sb); err != nil {
		c.t.Fatal(err)
	}
}

func do(t *testing.T, method, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func decodeSeen(t *testing.T, resp *http.Response, b []byte) seen {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var s seen
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return s
}

// A request at a node that does not own the sandbox is served by the
// owner, with the verified tenant, the original Host and the request id,
// and without the user's key; client-sent forwarding headers are
// replaced, never believed.
func TestForwardsToOwner(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.own("a", "n2")
	resp, b := do(t, "GET", c.nodes["n1"].user.URL+"/sb/a/files?path=%2Fx",
		"Authorization", "Bearer key-t1", "X-Api-Key", "e2b-key", "Host", "49983-a.example.test",
		forward.HeaderTenant, "evil", forward.HeaderKey, "1", "X-Berth-Forward-Anything", "x")
	s := decodeSeen(t, resp, b)
	want := seen{Node: "n2", Tenant: "t1", Host: "49983-a.example.test", Path: "/sb/a/files", Query: "path=%2Fx",
		RequestID: "req_fixedn1", Forwarded: true, Entry: "n1"}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("owner saw %+v\nwant       %+v", s, want)
	}
	if c.nodes["n1"].served.Load() != 0 || c.nodes["n2"].served.Load() != 1 {
		t.Fatalf("served: n1 %d, n2 %d", c.nodes["n1"].served.Load(), c.nodes["n2"].served.Load())
	}
	// An app's own Authorization travels when the face says so.
	resp, b = do(t, "GET", c.nodes["n1"].user.URL+"/sb/a", "Authorization", "Bearer key-t1", "X-Keep", "1")
	if s := decodeSeen(t, resp, b); s.Auth != "Bearer key-t1" || s.Node != "n2" {
		t.Fatalf("kept Authorization: %+v", s)
	}
}

// Ownership is read on every request: a moved sandbox is routed to its
// new owner at once; one owned here, ownerless or missing is local.
func TestOwnerReadEveryRequest(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	url := c.nodes["n1"].user.URL + "/sb/a"
	for _, owner := range []string{"n2", "n3", "n1", "", "n2"} {
		c.own("a", owner)
		resp, b := do(t, "GET", url, "Authorization", "Bearer key-t")
		want := owner
		if owner == "" {
			want = "n1"
		}
		if s := decodeSeen(t, resp, b); s.Node != want || s.Forwarded != (want != "n1") {
			t.Fatalf("owner %q: served by %+v", owner, s)
		}
	}
	resp, b := do(t, "GET", c.nodes["n1"].user.URL+"/sb/missing", "Authorization", "Bearer key-t")
	if s := decodeSeen(t, resp, b); s.Node != "n1" || s.Forwarded {
		t.Fatalf("missing sandbox: %+v", s)
	}
}

func decodeErr(t *testing.T, resp *http.Response, b []byte, status int) api.Error {
	t.Helper()
	var e api.Error
	if resp.StatusCode != status || json.Unmarshal(b, &e) != nil {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	return e
}

// A forwarded request is never forwarded again: a node that is not the
// owner either answers 503 "moved, retry", and the owner never sees it.
func TestLoopRefused(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.own("a", "n3")
	// n1 believed n2 owned it (the record moved to n3 in flight).
	resp, b := do(t, "GET", c.nodes["n2"].nodeL.URL+forward.Prefix+"/api/sb/a",
		"Authorization", "Bearer "+clusterToken, forward.HeaderHop, "1", "X-Berth-Forward-Entry", "n1")
	e := decodeErr(t, resp, b, http.StatusServiceUnavailable)
	if e.Code != "unavailable" || !strings.Contains(e.Message, "moved to node \"n3\"") || !strings.Contains(e.Message, "retry") {
		t.Fatalf("moved: %+v", e)
	}
	if c.nodes["n3"].served.Load() != 0 || c.nodes["n2"].served.Load() != 0 {
		t.Fatal("a forwarded request went on")
	}
	// Control: the owner itself serves a forwarded request.
	resp, b = do(t, "GET", c.nodes["n3"].nodeL.URL+forward.Prefix+"/api/sb/a",
		"Authorization", "Bearer "+clusterToken, forward.HeaderHop, "1")
	if s := decodeSeen(t, resp, b); s.Node != "n3" || !s.Forwarded {
		t.Fatalf("owner: %+v", s)
	}
}

// The node listener takes forwarded requests only with the cluster
// credential and the hop header; the identity headers it then believes
// are believed nowhere else (the user listener strips them: see
// TestForwardsToOwner's "evil" tenant).
func TestReceiverCredential(t *testing.T) {
	c := newCluster(t, "n1")
	u := c.nodes["n1"].nodeL.URL + forward.Prefix + "/api/sb/a"
	for _, hdr := range [][]string{
		{},
		{"Authorization", "Bearer wrong"},
		{"Authorization", "Bearer key-t1"},
		{"Authorization", "Basic " + clusterToken},
	} {
		resp, b := do(t, "GET", u, append(hdr, forward.HeaderHop, "1", forward.HeaderTenant, "victim")...)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%v: status %d %s", hdr, resp.StatusCode, b)
		}
	}
	if c.nodes["n1"].served.Load() != 0 {
		t.Fatal("an unauthenticated forward was served")
	}
	resp, b := do(t, "GET", u, "Authorization", "Bearer "+clusterToken)
	decodeErr(t, resp, b, http.StatusBadRequest) // no hop header
	// Negative control: with the credential the identity is believed.
	resp, b = do(t, "GET", u, "Authorization", "Bearer "+clusterToken, forward.HeaderHop, "1", forward.HeaderTenant, "victim")
	if s := decodeSeen(t, resp, b); s.Tenant != "victim" || len(s.Leaked) != 0 || s.Auth != "" {
		t.Fatalf("credentialed forward: %+v", s)
	}
	// An empty configured token refuses everything.
	h := forward.NewReceiver(forward.ReceiverConfig{API: http.HandlerFunc(c.nodes["n1"].echo)})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", forward.Prefix+"/api/x", nil)
	req.Header.Set("Authorization", "Bearer ")
	req.Header.Set(forward.HeaderHop, "1")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("empty token: %d", rec.Code)
	}
}

// A node with the wrong cluster credential gets a refusal it reports as
// the node's, not a 401 that would read as the user's key.
func TestEntryWithWrongCredential(t *testing.T) {
	c := newCluster(t, "n2")
	n1 := c.add("n1", forward.Config{})
	c.own("a", "n2")
	n1.fwd = forward.New(forward.Config{Self: "n1", Token: "not-the-token", Records: c.st, Nodes: c.st})
	resp, b := do(t, "GET", n1.user.URL+"/sb/a", "Authorization", "Bearer key-t")
	e := decodeErr(t, resp, b, http.StatusServiceUnavailable)
	if !strings.Contains(e.Message, `"n2"`) || !strings.Contains(e.Message, "refused") {
		t.Fatalf("%+v", e)
	}
}

// An owner without a node entry, with a stale heartbeat or that does not
// accept connections answers 503 unavailable naming the node; OwnerDown
// may serve it here instead (takeover plugs in there).
func TestOwnerDown(t *testing.T) {
	c := newCluster(t, "n1")
	ctx := context.Background()
	// Port 1 refuses (a closed httptest port could be reused by a node
	// this test adds later).
	deadURL := "http://127.0.0.1:1"
	if _, err := c.st.PutNode(ctx, store.Node{Name: "gone", Addr: deadURL, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c.own("a", "gone")
	c.own("b", "never-joined")
	for name, want := range map[string]string{"a": `node "gone"`, "b": `node "never-joined"`} {
		resp, b := do(t, "GET", c.nodes["n1"].user.URL+"/sb/"+name, "Authorization", "Bearer key-t")
		e := decodeErr(t, resp, b, http.StatusServiceUnavailable)
		if e.Code != "unavailable" || !strings.Contains(e.Message, want) || !strings.Contains(e.Message, "cannot be reached") {
			t.Fatalf("%s: %+v", name, e)
		}
	}
	// Stale: the node answers, but its heartbeat is too old.
	n2 := c.add("n2", forward.Config{})
	c.own("s", "n2")
	stale := c.add("n3", forward.Config{Staleness: time.Nanosecond})
	time.Sleep(2 * time.Millisecond)
	resp, b := do(t, "GET", stale.user.URL+"/sb/s", "Authorization", "Bearer key-t")
	if e := decodeErr(t, resp, b, http.StatusServiceUnavailable); !strings.Contains(e.Message, "heartbeat") || n2.served.Load() != 0 {
		t.Fatalf("stale: %+v", e)
	}
	// Control: without the staleness bound the same request reaches n2.
	resp, b = do(t, "GET", c.nodes["n1"].user.URL+"/sb/s", "Authorization", "Bearer key-t")
	if s := decodeSeen(t, resp, b); s.Node != "n2" {
		t.Fatalf("%+v", s)
	}
	// OwnerDown chooses local.
	var downs []forward.Down
	taker := c.add("n4", forward.Config{OwnerDown: forward.OwnerDownFunc(func(ctx context.Context, d forward.Down) (bool, error) {
		downs = append(downs, d)
		return true, nil
	})})
	for _, name := range []string{"a", "b"} {
		resp, b := do(t, "GET", taker.user.URL+"/sb/"+name, "Authorization", "Bearer key-t")
		if s := decodeSeen(t, resp, b); s.Node != "n4" {
			t.Fatalf("takeover of %s: %+v", name, s)
		}
	}
	if len(downs) != 2 || downs[0].Node != "gone" || downs[1].Node != "never-joined" || downs[0].Cause == nil {
		t.Fatalf("downs: %+v", downs)
	}
}

// OwnerDown that moves the sandbox onto another live node (a takeover
// placed elsewhere: forward.ErrTakenOver) sends the request to that node,
// both when the owner is known down before the dial and when the dial
// fails; its body arrives whole. Control: without the reroute the answer
// is OwnerDown's error, and nothing reaches the new owner.
func TestOwnerDownReroutes(t *testing.T) {
	c := newCluster(t, "n2")
	ctx := context.Background()
	// n9's entry is fresh but nothing listens at its address: the dial
	// fails (the proxy path); "never-joined" has no entry (the path
	// before the dial).
	if _, err := c.st.PutNode(ctx, store.Node{Name: "n9", Addr: "http://127.0.0.1:1", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	n2 := c.nodes["n2"]
	var bodies []string
	n2.local = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		n2.echo(w, r)
	})
	reroute := true
	var downs int
	entry := c.add("n1", forward.Config{OwnerDown: forward.OwnerDownFunc(func(ctx context.Context, d forward.Down) (bool, error) {
		downs++
		if !reroute {
			return false, errdefs.Unavailable("sandbox %q: no node can take it over", d.Sandbox)
		}
		c.own(d.Sandbox, "n2") // the takeover placement chose
		return false, errdefs.Wrap(errdefs.ErrUnavailable, forward.ErrTakenOver, "taken over onto n2")
	})})
	for _, owner := range []string{"n9", "never-joined"} {
		name := "r-" + owner
		c.own(name, owner)
		req, _ := http.NewRequest("POST", entry.user.URL+"/sb/"+name, strings.NewReader("the body"))
		req.Header.Set("Authorization", "Bearer key-t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if s := decodeSeen(t, resp, b); s.Node != "n2" || !s.Forwarded || s.Entry != "n1" {
			t.Fatalf("%s: served %+v, want n2 through n1", name, s)
		}
	}
	if downs != 2 || n2.served.Load() != 2 || entry.served.Load() != 0 {
		t.Fatalf("downs %d, n2 served %d, n1 served %d", downs, n2.served.Load(), entry.served.Load())
	}
	if len(bodies) != 2 || bodies[0] != "the body" || bodies[1] != "the body" {
		t.Fatalf("bodies at n2: %q", bodies)
	}
	// Control: OwnerDown refuses; the request is answered with its error.
	reroute = false
	c.own("r-refused", "n9")
	resp, b := do(t, "GET", entry.user.URL+"/sb/r-refused", "Authorization", "Bearer key-t")
	if e := decodeErr(t, resp, b, http.StatusServiceUnavailable); !strings.Contains(e.Message, "no node can take it over") {
		t.Fatalf("refused: %+v", e)
	}
	if n2.served.Load() != 2 {
		t.Fatalf("a refused request reached n2")
	}
}

// When the client hangs up, the owner's request is cancelled.
func TestCancelReachesOwner(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.own("a", "n2")
	started, cancelled := make(chan struct{}), make(chan struct{})
	c.nodes["n2"].local = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.Write([]byte("first\n"))
		http.NewResponseController(w).Flush()
		close(started)
		<-r.Context().Done()
		close(cancelled)
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.nodes["n1"].user.URL+"/sb/a/exec", nil)
	req.Header.Set("Authorization", "Bearer key-t")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "first\n" {
		t.Fatalf("streamed head: %q %v", line, err)
	}
	<-started
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the owner never saw the client leave")
	}
}

// A WebSocket (PTY, watch) passes through both ways.
func TestWebSocketThrough(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.own("a", "n2")
	c.nodes["n2"].local = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			typ, msg, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			ws.Write(r.Context(), typ, append([]byte("n2:"), msg...))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.nodes["n1"].user.URL, "http")+"/sb/a/terminal",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer key-t"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	for _, m := range []string{"ls", "pwd"} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != "n2:"+m {
			t.Fatalf("echo %q: %q %v", m, got, err)
		}
	}
}

// peakHeap samples the heap while f runs and returns the peak above
// what was in use before.
func peakHeap(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
					peak.Store(m.HeapInuse - base)
				}
			}
		}
	}()
	f()
	close(done)
	return peak.Load()
}

type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

// 100 MB each way through a forward: the bytes arrive intact and the
// heap never holds more than a small part of them (nothing is buffered
// whole). The negative control is the bound itself: a buffering proxy
// would need the 100 MB at once.
func TestLargeBodiesStream(t *testing.T) {
	const size = 100 << 20
	const bound = 24 << 20
	c := newCluster(t, "n1", "n2")
	c.own("a", "n2")
	var upSum string
	c.nodes["n2"].local = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			h := sha256.New()
			n, _ := io.Copy(h, r.Body)
			upSum = fmt.Sprintf("%d:%s", n, hex.EncodeToString(h.Sum(nil)))
			return
		}
		io.Copy(w, &zeros{n: size})
	})
	want := sha256.New()
	io.Copy(want, &zeros{n: size})
	wantSum := fmt.Sprintf("%d:%s", size, hex.EncodeToString(want.Sum(nil)))

	var gotSum string
	down := peakHeap(func() {
		req, _ := http.NewRequest("GET", c.nodes["n1"].user.URL+"/sb/a/files/content", nil)
		req.Header.Set("Authorization", "Bearer key-t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		h := sha256.New()
		n, _ := io.Copy(h, resp.Body)
		gotSum = fmt.Sprintf("%d:%s", n, hex.EncodeToString(h.Sum(nil)))
	})
	if gotSum != wantSum {
		t.Fatalf("download: %s, want %s", gotSum, wantSum)
	}
	up := peakHeap(func() {
		req, _ := http.NewRequest("PUT", c.nodes["n1"].user.URL+"/sb/a/files/content", &zeros{n: size})
		req.Header.Set("Authorization", "Bearer key-t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	})
	if upSum != wantSum {
		t.Fatalf("upload: %s, want %s", upSum, wantSum)
	}
	t.Logf("heap peak above baseline: download %d KiB, upload %d KiB (of %d MiB moved each way)", down>>10, up>>10, size>>20)
	if down > bound || up > bound {
		t.Fatalf("heap peak %d / %d bytes: the forward buffers", down, up)
	}
}

// Placement: a create goes to the Placer's node; a create forwarded here
// is created here; no Placer (or this node) is local.
func TestCreatePlacement(t *testing.T) {
	c := newCluster(t, "n2")
	var placed atomic.Int64
	n1 := c.add("n1", forward.Config{Placer: placerFunc(func(ctx context.Context, req api.CreateSandboxRequest) (string, error) {
		placed.Add(1)
		if req.Name == "here" {
			return "n1", nil
		}
		if req.Name == "nowhere" {
			return "", errdefs.ResourceExhausted("no node has room")
		}
		return "n2", nil
	})})
	create := func(n *node) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if _, ok := forward.From(ctx); !ok {
				ctx = policy.WithTenant(ctx, "t")
			}
			r = r.WithContext(ctx)
			var req api.CreateSandboxRequest
			b, _ := io.ReadAll(r.Body)
			json.Unmarshal(b, &req)
			r.Body = io.NopCloser(strings.NewReader(string(b)))
			out, err := n.fwd.Create(w, r, req, forward.Route{Face: forward.API})
			if err != nil {
				w.WriteHeader(api.HTTPStatus(err))
				json.NewEncoder(w).Encode(api.ErrorBody(err))
				return
			}
			if out == forward.Proxied {
				return
			}
			fmt.Fprintf(w, "%s created %s from %s", n.name, req.Name, b)
		}
	}
	n1.user.Config.Handler = create(n1)
	c.nodes["n2"].nodeL.Config.Handler = forward.NewReceiver(forward.ReceiverConfig{Token: clusterToken, API: create(c.nodes["n2"])})
	for name, want := range map[string]string{
		"there":   `n2 created there from {"name":"there"}`,
		"here":    `n1 created here from {"name":"here"}`,
		"nowhere": `no node has room`,
	} {
		resp, err := http.Post(n1.user.URL+"/v1/sandboxes", "application/json", strings.NewReader(`{"name":"`+name+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
	if placed.Load() != 3 {
		t.Fatalf("placer asked %d times", placed.Load())
	}
}

type placerFunc func(ctx context.Context, req api.CreateSandboxRequest) (string, error)

func (f placerFunc) Place(ctx context.Context, req api.CreateSandboxRequest) (string, error) {
	return f(ctx, req)
}

// TestObjectCallsGoToTheLeaseHolder: a durable object's call is served by
// the member its holder function names: here when that is this member,
// proxied when it is another; a forwarded call that reaches a member
// which no longer holds the object is refused "moved", never sent on; a
// holder that cannot be looked up is 503.
func TestObjectCallsGoToTheLeaseHolder(t *testing.T) {
	c := newCluster(t)
	var mu sync.Mutex
	holders := map[string]string{"Counter/a": "n2", "Counter/b": "n1"}
	holder := func(_ context.Context, class, id string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		h, ok := holders[class+"/"+id]
		if !ok {
			return "", errors.New("store down")
		}
		return h, nil
	}
	for _, name := range []string{"n1", "n2"} {
		c.add(name, forward.Config{ObjectHolder: holder})
	}
	resp, b := do(t, "POST", c.nodes["n1"].user.URL+"/obj/Counter/a", "Authorization", "Bearer key-t1")
	if s := decodeSeen(t, resp, b); s.Node != "n2" || !s.Forwarded {
		t.Fatalf("object held by n2, called through n1: %+v", s)
	}
	resp, b = do(t, "POST", c.nodes["n1"].user.URL+"/obj/Counter/b", "Authorization", "Bearer key-t1")
	if s := decodeSeen(t, resp, b); s.Node != "n1" || s.Forwarded {
		t.Fatalf("object held here: %+v", s)
	}
	// The lease moved to n1 while a call forwarded to n2 was in flight.
	resp, b = do(t, "POST", c.nodes["n2"].nodeL.URL+forward.Prefix+"/api/obj/Counter/b",
		"Authorization", "Bearer "+clusterToken, forward.HeaderHop, "1", "X-Berth-Forward-Entry", "n3")
	if e := decodeErr(t, resp, b, http.StatusServiceUnavailable); !strings.Contains(e.Message, "moved") {
		t.Fatalf("forwarded to a member that lost the object: %+v", e)
	}
	resp, b = do(t, "POST", c.nodes["n1"].user.URL+"/obj/Counter/unknown", "Authorization", "Bearer key-t1")
	decodeErr(t, resp, b, http.StatusServiceUnavailable)
	if c.nodes["n2"].served.Load() != 1 || c.nodes["n1"].served.Load() != 1 {
		t.Fatalf("served: n1 %d, n2 %d; want 1 each", c.nodes["n1"].served.Load(), c.nodes["n2"].served.Load())
	}
}

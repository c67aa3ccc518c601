package forward

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/e2b"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/preview"
	"github.com/berth-sh/berth/server"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

const (
	adminKey     = "e2b_0123456789abcdef0123456789abcdef01234567"
	clusterToken = "node-token-for-the-test-cluster"
)

// tenantKeys are the operator policy's tenant keys.
var tenantKeys = map[string]string{"key-t1": "t1", "key-t2": "t2"}

func tenants(key string) (string, bool) {
	t, ok := tenantKeys[key]
	return t, ok
}

// countingNode counts the agent uses that reach it: the owner's count
// grows, every other node's stays 0.
type countingNode struct {
	node.Node
	agents atomic.Int64
}

func (c *countingNode) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	c.agents.Add(1)
	return c.Node.Agent(ctx, name)
}

// backend is one node's control plane: the real control.Plane for exec,
// files and agent access (through its node), with the lifecycle calls
// (which need durable objects) done directly on the shared store, writing
// Owner as node/local does.
type backend struct {
	*control.Plane
	self string
	st   store.Store
	fake *nodetest.Fake
	node *countingNode
}

func (b *backend) record(ctx context.Context, name string) (store.Sandbox, error) {
	rec, err := b.st.Get(ctx, name)
	if err != nil {
		return rec, err
	}
	if rec.Tenant != policy.TenantFrom(ctx) && policy.TenantFrom(ctx) != "" {
		return store.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	return rec, nil
}

func (b *backend) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error) {
	if rec, err := b.record(ctx, req.Name); err == nil {
		if createOnly {
			return api.Sandbox{}, false, errdefs.AlreadyExists("sandbox %q already exists", req.Name)
		}
		return rec.View(), false, nil
	}
	if err := b.fake.Start(ctx, req.Name, node.StartOptions{Image: req.Image, Labels: req.Labels}); err != nil {
		return api.Sandbox{}, false, err
	}
	now := time.Now().UTC()
	rec := store.Sandbox{Name: req.Name, ID: "id-" + req.Name, State: api.StateRunning, Image: req.Image,
		Labels: req.Labels, Tenant: policy.TenantFrom(ctx), Owner: b.self, OwnerEpoch: 1,
		CreatedAt: now, StartedAt: now, LastActive: now}
	if _, err := b.st.Put(ctx, rec); err != nil {
		return api.Sandbox{}, false, err
	}
	return rec.View(), true, nil
}

func (b *backend) Get(ctx context.Context, name string) (api.Sandbox, error) {
	rec, err := b.record(ctx, name)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb := rec.View()
	// Which node answered, for the test to see (a live addition, as the
	// real node's OOM flag is).
	sb.Labels = mergeLabels(sb.Labels, map[string]string{"answered-by": b.self})
	return sb, nil
}

func mergeLabels(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func (b *backend) Destroy(ctx context.Context, name string) error {
	if _, err := b.record(ctx, name); err != nil {
		return err
	}
	if err := b.fake.Destroy(ctx, name, "destroyed"); err != nil {
		return err
	}
	return b.st.Delete(ctx, name)
}

func (b *backend) SetLabels(ctx context.Context, name string, set map[string]string) (api.Sandbox, error) {
	rec, err := b.record(ctx, name)
	if err != nil {
		return api.Sandbox{}, err
	}
	if rec.Labels == nil {
		rec.Labels = map[string]string{}
	}
	for k, v := range set {
		if v == "" {
			delete(rec.Labels, k)
		} else {
			rec.Labels[k] = v
		}
	}
	if _, err := b.st.Put(ctx, rec); err != nil {
		return api.Sandbox{}, err
	}
	return rec.View(), nil
}

// tnode is one berth process: its API listener (Guard, E2B face, native
// API), its preview listener and its node listener.
type tnode struct {
	name    string
	be      *backend
	fwd     *forward.Forwarder
	api     http.Handler
	prev    *preview.Proxy
	pcfg    preview.Config
	user    *httptest.Server
	preview *httptest.Server
	nodeL   *httptest.Server

	expMu sync.Mutex
	exps  map[string]preview.Exposure // "sandbox/port"
}

type cluster struct {
	t     *testing.T
	st    *sqlite.Store
	nodes map[string]*tnode
	// place maps a sandbox name to the node placement picks for it
	// (else the entry node).
	placeMu sync.Mutex
	place   map[string]string
}

type placer struct{ c *cluster }

func (p placer) Place(ctx context.Context, req api.CreateSandboxRequest) (string, error) {
	p.c.placeMu.Lock()
	defer p.c.placeMu.Unlock()
	if n, ok := p.c.place[req.Name]; ok {
		return n, nil
	}
	return p.c.place["*"], nil
}

func (c *cluster) placeOn(sandbox, node string) {
	c.placeMu.Lock()
	c.place[sandbox] = node
	c.placeMu.Unlock()
}

func newCluster(t *testing.T, names ...string) *cluster {
	t.Helper()
	if !agenttest.Available() {
		t.Skip("needs root: the nodes' in-process agents run commands as other users")
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &cluster{t: t, st: st, nodes: map[string]*tnode{}, place: map[string]string{}}
	for _, n := range names {
		c.add(n)
	}
	return c
}

func (c *cluster) add(name string) *tnode {
	t := c.t
	n := &tnode{name: name, exps: map[string]preview.Exposure{}}
	be := &backend{self: name, st: c.st}
	be.fake = nodetest.NewFake(t, func(tb testing.TB) string {
		a := agenttest.Start(tb)
		return a.Socket
	})
	be.node = &countingNode{Node: be.fake}
	be.Plane = control.NewPlane(control.PlaneConfig{Store: c.st, Node: be.node})
	n.be = be
	n.fwd = forward.New(forward.Config{Self: name, Token: clusterToken, Records: c.st, Nodes: c.st, Placer: placer{c}})

	e2bh := e2b.New(be, e2b.Options{APIKey: adminKey, Tenants: tenants, Forward: n.fwd})
	native := server.New(be, server.Options{APIKey: adminKey, Tenants: tenants, Forward: n.fwd})
	n.api = server.Guard(e2bh.Wrap(native), server.GuardOptions{Passthrough: e2b.AppTraffic})
	// As the daemon's: HTTP/1.1 and cleartext HTTP/2 (Connect clients).
	n.user = httptest.NewUnstartedServer(n.api)
	n.user.Config.Protocols = new(http.Protocols)
	n.user.Config.Protocols.SetHTTP1(true)
	n.user.Config.Protocols.SetUnencryptedHTTP2(true)
	n.user.Start()
	t.Cleanup(n.user.Close)

	n.preview = httptest.NewUnstartedServer(nil)
	n.pcfg = preview.Config{PublicHost: "preview.test", APIKey: adminKey, Forward: n.fwd}
	n.prev = preview.NewProxy(preview.ResolverFunc(n.lookup), n.pcfg)
	n.preview.Config.Handler = n.prev
	n.preview.Start()
	t.Cleanup(n.preview.Close)

	recv := forward.NewReceiver(forward.ReceiverConfig{Token: clusterToken, API: n.api, Preview: n.prev})
	n.nodeL = httptest.NewServer(forward.Mount(http.NotFoundHandler(), recv))
	t.Cleanup(n.nodeL.Close)
	if _, err := c.st.PutNode(context.Background(), store.Node{Name: name, Addr: n.nodeL.URL, Roles: []string{"control", "node"}, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c.nodes[name] = n
	return n
}

// expose makes a preview of port on the node that owns sandbox: only that
// node's resolver knows it (as node/local's exposures are its own).
func (n *tnode) expose(sandbox string, port int, private bool) preview.Exposure {
	e := preview.Exposure{Sandbox: sandbox, Port: port, Token: preview.NewToken(), Private: private, RunID: "run1", CreatedAt: time.Now()}
	n.expMu.Lock()
	n.exps[sandbox+"/"+itoa(port)] = e
	n.expMu.Unlock()
	return e
}

func (n *tnode) lookup(ctx context.Context, sandbox string, port int, token string) (preview.Exposure, preview.DialFunc, error) {
	n.expMu.Lock()
	e, ok := n.exps[sandbox+"/"+itoa(port)]
	n.expMu.Unlock()
	if !ok || e.Token != token {
		return preview.Exposure{}, nil, errdefs.NotFound("no preview URL for port %d of %q", port, sandbox)
	}
	ag, release, err := n.be.node.Agent(ctx, sandbox)
	if err != nil {
		return preview.Exposure{}, nil, err
	}
	release()
	return e, func(ctx context.Context) (net.Conn, error) { return ag.DialPort(ctx, port) }, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// agentUses is how many agent uses reached each node.
func (c *cluster) agentUses() map[string]int64 {
	out := map[string]int64{}
	for name, n := range c.nodes {
		out[name] = n.be.node.agents.Load()
	}
	return out
}

// onlyOwnerUsed fails unless every agent use since the last call was the
// owner's.
func (c *cluster) onlyOwnerUsed(owner string, before map[string]int64) {
	c.t.Helper()
	after := c.agentUses()
	for name, n := range after {
		grew := n > before[name]
		if grew != (name == owner) {
			c.t.Fatalf("agent uses %v -> %v: only %s should have grown", before, after, owner)
		}
	}
}

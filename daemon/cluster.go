package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/control/membership"
	"github.com/berth-sh/berth/control/placement"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/node/local"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
)

// Cluster mode is on when the state store is PostgreSQL (--cluster). Every
// process then is a member with a name; the wiring here connects the
// pieces that live in their own packages:
//
//   - the node owns only the sandboxes whose record names it
//     (local.Config.NodeName) and fences, after every heartbeat, the
//     containers of sandboxes the cluster moved away (Manager.Fence);
//   - the API faces forward requests for sandboxes another node owns to
//     it and creates to the node placement chose (control/forward over
//     the node listener, control/placement);
//   - a request for a sandbox whose owner is dead (no heartbeat for
//     --node-stale) takes the sandbox over (store.TakeoverFrom) onto the
//     node placement chooses, and goes there (or is served here when
//     that is this member): it wakes from its last persisted state;
//   - a sleeping sandbox of a draining node moves, on its next request,
//     to the member that got it (or placement's choice), and the draining
//     node sleeps its running ones so that they follow (drain.go);
//   - alarms are delivered where their object lives: a sandbox's where
//     the sandbox is owned, any other object's by the holder of a lease.

// clusterMode reports whether cfg joins a cluster.
func (c Config) clusterMode() bool { return c.Cluster != "" }

// isNode reports whether the process's roles include running sandboxes.
func (c NodeConfig) isNode() bool {
	roles, err := membership.ParseRole(c.Role)
	if err != nil {
		return false
	}
	for _, r := range roles {
		if r == placement.RoleNode {
			return true
		}
	}
	return false
}

// checkCluster refuses, at start, a cluster configuration that cannot work.
func (c Config) checkCluster() error {
	if !c.clusterMode() {
		return nil
	}
	if c.Member.isNode() && c.Node.Listen == "" {
		return errors.New("--cluster with the node role needs --node-listen: other members forward requests for this node's sandboxes to its node API")
	}
	return nil
}

// advertisedNodeURL is the node API's URL in this member's entry: what
// other members dial. A listener on every interface (":7071",
// "0.0.0.0:7071") has no address others can use, so it needs
// --node-advertise.
func (c NodeAPIConfig) advertisedNodeURL(listening string) (string, error) {
	if c.Advertise != "" {
		u, err := url.Parse(c.Advertise)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--node-advertise %q: want http(s)://host:port", c.Advertise)
		}
		return c.Advertise, nil
	}
	u, err := url.Parse(listening)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("--node-listen %s listens on every interface: give --node-advertise with the URL other members reach this node at", c.Listen)
	}
	return listening, nil
}

// clusterWiring is what cluster mode adds around this process's node.
type clusterWiring struct {
	self   string
	isNode bool
	st     stateStore
	stale  time.Duration
	logf   func(string, ...any)
	// evict drops a durable object's instance here (durable.Host.Evict),
	// resident says whether one is in memory (durable.Host.Resident); set
	// once the object host exists.
	evict    func(durable.Address)
	resident func(durable.Address) bool

	// For moving sandboxes off draining nodes (drain.go), set by
	// newForwarder: where placement puts one, and whether the blob store
	// is shared (S3), so that a persisted sandbox can wake elsewhere.
	placer      forward.Placer
	sharedBlobs bool

	mu     sync.Mutex
	epochs map[string]int64     // object lease key -> the epoch this member last held it at
	held   map[string]heldLease // object leases held now (objlease.go)
	logged map[string]int64     // logOnce: the record version last logged per sandbox
}

// ownerDown is forward.OwnerDown: a sandbox whose owner cannot be reached
// is taken over when the owner is dead (its entry is gone, or its
// heartbeat is older than the staleness bound); otherwise the answer is
// 503, naming the node. Placement chooses the node it moves to (takeoverTo:
// capacity, isolation, the tenant's nodes, image and snapshot locality),
// which need not be this member: a full member, or one of role control,
// routes the takeover all the same. The takeover is conditional on the
// record as read, still naming the dead owner: of two members taking over
// at once one wins, and the other sends the request to the winner's
// choice (forward.ErrTakenOver), as this one does when it chose another
// node.
func (w *clusterWiring) ownerDown(ctx context.Context, d forward.Down) (bool, error) {
	n, err := w.st.GetNode(ctx, d.Node)
	var age time.Duration
	switch {
	case errdefs.IsKind(err, errdefs.ErrNotFound):
	case err != nil:
		return false, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox %q runs on node %q, which cannot be reached (%v), and its entry cannot be read (%v); retry", d.Sandbox, d.Node, d.Cause, err)
	default:
		now, err := w.st.Now(ctx)
		if err != nil {
			return false, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox %q: read the store's clock: %v", d.Sandbox, err)
		}
		if age = now.Sub(n.Heartbeat); age <= w.stale {
			return false, errdefs.Wrap(errdefs.ErrUnavailable, d.Cause,
				"sandbox %q runs on node %q, which cannot be reached (%v) but is not dead: its last heartbeat is %s old (dead after %s); retry",
				d.Sandbox, d.Node, d.Cause, age.Round(time.Millisecond), w.stale)
		}
	}
	rec, err := w.st.Get(ctx, d.Sandbox)
	if err != nil {
		return false, errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox %q: read its record to take it over from dead node %q: %v; retry", d.Sandbox, d.Node, err)
	}
	if rec.Owner != d.Node {
		return false, errdefs.Wrap(errdefs.ErrUnavailable, forward.ErrTakenOver, "sandbox %q moved off dead node %q to %q while this request was routed; retry", d.Sandbox, d.Node, rec.Owner)
	}
	to, err := w.takeoverTo(ctx, rec)
	if err != nil {
		return false, err
	}
	rec, err = store.TakeoverFrom(ctx, w.st, rec, d.Node, to)
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
			// Another member took it over first: route by its record.
			return false, errdefs.Wrap(errdefs.ErrUnavailable, forward.ErrTakenOver, "sandbox %q is moving off dead node %q right now; retry", d.Sandbox, d.Node)
		}
		return false, errdefs.Wrap(errdefs.ErrUnavailable, err, "take over sandbox %q from dead node %q: %v", d.Sandbox, d.Node, err)
	}
	_ = w.st.Append(ctx, store.JournalEntry{Sandbox: d.Sandbox, Op: "takeover", Detail: fmt.Sprintf("from %s (heartbeat %s old) to %s (chosen by %s), epoch %d", d.Node, age.Round(time.Millisecond), to, w.self, rec.OwnerEpoch), At: time.Now()})
	w.logf("takeover: sandbox %s from dead node %s (last heartbeat %s ago) to %s, epoch %d", d.Sandbox, d.Node, age.Round(time.Millisecond), to, rec.OwnerEpoch)
	if to == w.self {
		return true, nil
	}
	return false, errdefs.Wrap(errdefs.ErrUnavailable, forward.ErrTakenOver, "sandbox %q was taken over from dead node %q onto node %q; retry", d.Sandbox, d.Node, to)
}

// takeoverTo is the node a dead owner's sandbox rec moves to: placement's
// choice for it (moveRequest: its size, isolation, image and persisted
// snapshot, under its tenant's bounds; the dead node is stale, so never
// chosen). Without a placer (tests) it is this member when it runs
// sandboxes.
func (w *clusterWiring) takeoverTo(ctx context.Context, rec store.Sandbox) (string, error) {
	if w.placer == nil {
		if !w.isNode {
			return "", errdefs.Unavailable("sandbox %q: its node %q is dead and this member (role control) runs no sandboxes to take it over; retry through a node", rec.Name, rec.Owner)
		}
		return w.self, nil
	}
	to, err := w.placer.Place(policy.WithTenant(ctx, rec.Tenant), moveRequest(rec))
	if err != nil {
		return "", errdefs.Wrap(errdefs.ErrUnavailable, err, "sandbox %q: its node %q is dead and no node can take it over: %v; retry", rec.Name, rec.Owner, err)
	}
	switch to {
	case "":
		if !w.isNode {
			return "", errdefs.Unavailable("sandbox %q: its node %q is dead and placement chose no node for it; retry", rec.Name, rec.Owner)
		}
		return w.self, nil
	case rec.Owner:
		// The node list this member placed by still had the owner alive
		// (it is at most a second or two old).
		return "", errdefs.Unavailable("sandbox %q: its node %q is dead, but this member's node list does not show it yet; retry", rec.Name, rec.Owner)
	}
	return to, nil
}

// owns is durable.Config.Owns: a sandbox's object lives where the sandbox
// is owned; any other object (an embedding program's class, a destroyed
// sandbox's leftover alarm) where its lease is held, taken by the first
// member that asks and renewed as long as it keeps asking.
func (w *clusterWiring) owns(ctx context.Context, a durable.Address) (bool, error) {
	if a.Class == durable.BuiltinSandboxClass {
		rec, err := w.st.Get(ctx, a.ID)
		if err == nil {
			return rec.Owner == w.self || (rec.Owner == "" && w.isNode), nil
		}
		if !errdefs.IsKind(err, errdefs.ErrNotFound) {
			return false, err
		}
	}
	holder, err := w.objectHolder(ctx, a.Class, a.ID)
	return err == nil && holder == w.self, err
}

// objectLeaseKey is the lease a durable object lives under in a cluster.
func objectLeaseKey(class, id string) string { return "object/" + class + "/" + id }

// objectHolder is forward.Config.ObjectHolder: the member holding object
// (class, id)'s lease, taking it here when it is free. When this member
// takes a lease whose epoch moved since it last held it, another member
// held the object in between, so the instance this process may still keep
// in memory is evicted before it serves (its Storage is current; its
// memory may not be). The lease lasts --node-stale past its last call or
// alarm tick here, as long as a dead member's sandboxes wait, and is
// renewed while its instance stays in memory here (leaseLoop).
func (w *clusterWiring) objectHolder(ctx context.Context, class, id string) (string, error) {
	key := objectLeaseKey(class, id)
	sent := time.Now()
	l, err := w.st.AcquireLease(ctx, key, w.self, w.stale)
	if errdefs.IsKind(err, errdefs.ErrAlreadyExists) {
		return l.Holder, nil
	}
	if err != nil {
		return "", err
	}
	addr := durable.Address{Class: class, ID: id}
	w.leaseHeld(addr, key, l.Epoch)
	w.hold(addr, l, sent)
	return w.self, nil
}

// leaseHeld records the epoch this member holds key at, evicting the
// local instance when the epoch moved since it last held it.
func (w *clusterWiring) leaseHeld(addr durable.Address, key string, epoch int64) {
	w.mu.Lock()
	last, seen := w.epochs[key]
	if w.epochs == nil {
		w.epochs = map[string]int64{}
	}
	w.epochs[key] = epoch
	w.mu.Unlock()
	if seen && last != epoch && w.evict != nil {
		w.evict(addr)
		w.logf("object %s/%s: lease back at epoch %d (held elsewhere since epoch %d): its instance here was dropped, the next call rebuilds it from storage", addr.Class, addr.ID, epoch, last)
	}
}

// fenceLoop runs Fence every interval until ctx ends: a node that was
// paused or cut off past the staleness bound stops the containers of the
// sandboxes the cluster moved away, without writing their records.
func fenceLoop(ctx context.Context, mgr *local.Manager, every time.Duration) {
	everyTick(ctx, every, func() { mgr.Fence(ctx) })
}

// newPlacer is the placement of creates over the store's node list.
// image resolves a create's image to its digest here ("" when unknown).
//
// weaken.Locality (berthtest builds only) zeroes the image and chain
// weights, so the locality test's negative control can show placement no
// longer follows the layers.
func newPlacer(st stateStore, image func(ctx context.Context, ref string) string, pol *policy.Policy, cfg Config, logf func(string, ...any)) *placement.Placer {
	opts := placement.Options{Staleness: cfg.Member.Stale}
	if weaken.Off(weaken.Locality) {
		w := placement.DefaultWeights()
		w.Image, w.Chain = 0, 0
		opts.Weights = &w
	}
	return placement.NewPlacer(placement.PlacerConfig{
		Nodes: placement.NewNodeCache(st, placement.NodeCacheMaxAge),
		Resources: func(instance string, custom *api.Resources) (api.Resources, error) {
			_, r, err := local.ResolveInstance(instance, custom)
			return r, err
		},
		Image:            image,
		Snapshots:        st,
		Policy:           pol,
		DefaultIsolation: cfg.DefaultIsolation,
		Options:          opts,
		Logf:             logf,
	})
}

// clusterName is the node name ownership goes by: the member's in a
// cluster, "" on a single host (where every record is this node's).
func clusterName(cfg Config) string {
	if !cfg.clusterMode() {
		return ""
	}
	return cfg.Member.Name
}

// imageDigest is the digest of the image a create names ("" for the
// default image) in this node's store, or "" when it is not there.
func imageDigest(ctx context.Context, imgs *image.Store, ref string) string {
	if ref == "" {
		ref = local.DefaultImageName
	}
	img, err := imgs.Resolve(ctx, ref)
	if err != nil {
		return ""
	}
	return img.Digest
}

// newForwarder is the entry side of forwarding, over the node APIs of the
// other members with this process's TLS settings: plain http only to
// loopback, unless --node-insecure.
func newForwarder(cfg Config, token string, st stateStore, placer forward.Placer, w *clusterWiring) (*forward.Forwarder, error) {
	tlsConf, err := cfg.Node.clientTLS()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:                 nil, // node traffic is never proxied
		DialContext:           (&net.Dialer{Timeout: forward.DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false, // an Upgrade (PTY, watch) needs HTTP/1.1
	}
	w.placer, w.sharedBlobs = placer, cfg.Blobs.S3Endpoint != ""
	return forward.New(forward.Config{
		Self: cfg.Member.Name, Token: token, Records: st, Nodes: st, Placer: placer,
		OwnerDown:     forward.OwnerDownFunc(w.ownerDown),
		Mover:         forward.MoverFunc(w.moveOff),
		ObjectHolder:  w.objectHolder,
		Staleness:     cfg.Member.Stale,
		OwnerCacheAge: cfg.Member.OwnerCache,
		NodeCacheAge:  cfg.Member.NodeCache,
		Transport:     clearGuard{rt: tr, insecure: cfg.Node.Insecure},
		Logf:          w.logf,
	}), nil
}

// clearGuard refuses to send the cluster credential in plain HTTP to a
// host that is not loopback, unless the operator said the network is
// trusted (--node-insecure).
type clearGuard struct {
	rt       http.RoundTripper
	insecure bool
}

func (g clearGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !g.insecure && !isLoopbackHost(r.URL.Hostname()) {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("node URL %s://%s is plain http to a host that is not loopback: the cluster credential would cross the network in the clear (serve the node API with TLS, or give --node-insecure on a trusted network)", r.URL.Scheme, r.URL.Host)
	}
	return g.rt.RoundTrip(r)
}

// everyTick calls fn every interval until ctx ends: the shape of cluster
// mode's background loops (fencing, drain, lease renewal, the stale watch).
func everyTick(ctx context.Context, every time.Duration, fn func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

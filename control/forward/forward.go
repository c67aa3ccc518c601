package forward

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/reqinfo"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
)

// DefaultDialTimeout bounds the connection to an owner: a node that does
// not accept within it is down (OwnerDown decides what then).
const DefaultDialTimeout = 3 * time.Second

// Records reads sandbox records (store.Store has it).
type Records interface {
	Get(ctx context.Context, name string) (store.Sandbox, error)
}

// Nodes reads node entries (store.Cluster has both methods).
type Nodes interface {
	GetNode(ctx context.Context, name string) (store.Node, error)
	// Now is the store's clock, which node heartbeats are in.
	Now(ctx context.Context) (time.Time, error)
}

// Placer chooses the node of a new sandbox (an adapter over
// control/placement satisfies it). "" or the forwarder's own name places it
// here. The caller's tenant is in ctx (policy.TenantFrom).
type Placer interface {
	Place(ctx context.Context, req api.CreateSandboxRequest) (node string, err error)
}

// Down describes an owner that cannot be reached.
type Down struct {
	Sandbox string
	Node    string // the owner the record names
	Cause   error  // what failed: no entry, a stale heartbeat, the connection
}

// OwnerDown decides what a request for a sandbox whose owner is down gets.
// local true serves it on this node (a takeover that made this node the
// owner first); an error with ErrTakenOver as its cause sends it to the
// sandbox's new owner (a takeover onto another node); otherwise err is the
// answer. The default (nil in Config) answers 503 unavailable naming the
// node.
type OwnerDown interface {
	OwnerDown(ctx context.Context, d Down) (local bool, err error)
}

// ErrTakenOver, as the cause of an OwnerDown error (errors.Is), says that
// the sandbox now belongs to another live node (OwnerDown took it over
// there, or found another member had): the Forwarder reads the record
// again and sends the request to the new owner. The error itself is only
// answered when the request cannot be sent again (a bounded number of
// rounds, or the old owner consumed part of its body), so give it a kind
// (unavailable: retry).
var ErrTakenOver = errors.New("the sandbox moved to another node")

// OwnerDownFunc adapts a function to OwnerDown.
type OwnerDownFunc func(ctx context.Context, d Down) (bool, error)

// OwnerDown implements OwnerDown.
func (f OwnerDownFunc) OwnerDown(ctx context.Context, d Down) (bool, error) { return f(ctx, d) }

// refuseDown is the default OwnerDown: a clear 503 that names the node.
func refuseDown(_ context.Context, d Down) (bool, error) {
	return false, errdefs.Wrap(errdefs.ErrUnavailable, d.Cause,
		"sandbox %q runs on node %q, which cannot be reached (%v); retry later", d.Sandbox, d.Node, d.Cause)
}

// Mover moves sleeping sandboxes off draining nodes (berth node drain):
// Sandbox calls it for a request, made at this node, for a sleeping
// sandbox whose owner's entry is Draining (this node's own included).
// Move returns the node that owns rec now; "" (or rec.Owner) leaves it
// where it is, and the request goes to its owner, which is alive and
// still serves it. An errdefs failed-precondition error says the record
// changed since rec was read (it woke, or another member moved it first):
// Sandbox reads it again and routes by what it finds. Any other error is
// logged and the request goes to the owner.
type Mover interface {
	Move(ctx context.Context, rec store.Sandbox) (node string, err error)
}

// MoverFunc adapts a function to Mover.
type MoverFunc func(ctx context.Context, rec store.Sandbox) (string, error)

// Move implements Mover.
func (f MoverFunc) Move(ctx context.Context, rec store.Sandbox) (string, error) { return f(ctx, rec) }

// maxRoutes bounds how often Sandbox reads a record again after a move
// (its own, or a racing one): a sandbox that keeps moving under a request
// is routed by the last record read.
const maxRoutes = 3

// Face names the handler set a forwarded request is for on the owner.
type Face string

// The faces Receiver serves.
const (
	API     Face = "api"     // the API listener: native API, E2B face, console
	Preview Face = "preview" // the preview listener
)

// Route says how a face wants its request forwarded.
type Route struct {
	Face Face
	// KeepAuthorization passes the request's Authorization header to the
	// owner (it travels in its own header, the cluster credential takes
	// its place): set it where Authorization is not berth's key (a
	// preview's or a sandbox app's own). Otherwise it is dropped: it was
	// the user's key and the entry node already checked it.
	KeepAuthorization bool
	// KeyVerified tells the owner the caller presented berth's API key
	// (a private preview admits it).
	KeyVerified bool
}

// Outcome is what Sandbox and Create did.
type Outcome int

// Outcomes.
const (
	// Local: serve the request here (this node owns the sandbox, or
	// nobody does yet).
	Local Outcome = iota
	// Missing: no such sandbox; serve it here (the face answers 404, or
	// a get-or-create goes to Create).
	Missing
	// Proxied: the owner's answer was proxied (or the client left); the
	// face must not write anything.
	Proxied
)

// Config configures New.
type Config struct {
	// Self is this node's name (store.Node.Name).
	Self string
	// Token is the cluster credential forwarded requests carry.
	Token   string
	Records Records
	Nodes   Nodes
	// Placer places creates; nil places every create here.
	Placer Placer
	// ObjectHolder names the member where durable object (class, id)
	// lives, taking its lease for this member when it is free (the
	// daemon's lease "object/CLASS/ID", the one alarms go by). Nil: every
	// object call is served here.
	ObjectHolder func(ctx context.Context, class, id string) (holder string, err error)
	// OwnerDown decides for unreachable owners; nil answers 503.
	OwnerDown OwnerDown
	// Mover moves sleeping sandboxes off draining owners; nil: a
	// draining owner is proxied to like any other.
	Mover Mover
	// Staleness, when positive, treats an owner whose heartbeat is older
	// (in the store's clock) as down without dialling it.
	Staleness time.Duration
	// NodeCacheAge bounds how old the node entry (address, heartbeat,
	// draining) a request is routed by may be: 0 is DefaultNodeCacheAge,
	// negative reads the entry on every request. The sandbox's record,
	// which names its owner, is read on every request whatever this says.
	NodeCacheAge time.Duration
	// OwnerCacheAge bounds how long requests for a sandbox running on
	// another node are routed by the owner last read, without reading its
	// record (the owner checks it and refuses a sandbox it no longer owns:
	// see ownerCache): 0 is DefaultOwnerCacheAge, negative reads the
	// record on every request.
	OwnerCacheAge time.Duration
	// Transport carries forwarded requests; nil: a plain HTTP/1.1
	// transport (Upgrade needs HTTP/1.1) with DialTimeout.
	Transport   http.RoundTripper
	DialTimeout time.Duration
	Logf        func(format string, args ...any)
}

// Router is what the faces hold (nil on a single host); Forwarder is the
// implementation.
type Router interface {
	Sandbox(w http.ResponseWriter, r *http.Request, name string, rt Route) (Outcome, error)
	Create(w http.ResponseWriter, r *http.Request, req api.CreateSandboxRequest, rt Route) (Outcome, error)
	Object(w http.ResponseWriter, r *http.Request, class, id string, rt Route) (Outcome, error)
}

var _ Router = (*Forwarder)(nil)

// Forwarder is the entry side (see the package documentation).
type Forwarder struct {
	c      Config
	rp     *httputil.ReverseProxy
	nodes  nodeCache
	owners ownerCache
}

// New returns a Forwarder.
func New(c Config) *Forwarder {
	if c.OwnerDown == nil {
		c.OwnerDown = OwnerDownFunc(refuseDown)
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.NodeCacheAge == 0 {
		c.NodeCacheAge = DefaultNodeCacheAge
	}
	if c.OwnerCacheAge == 0 {
		c.OwnerCacheAge = DefaultOwnerCacheAge
	}
	if c.Transport == nil {
		c.Transport = &http.Transport{
			// Proxy is nil: HTTP_PROXY in the daemon's environment must
			// never carry node-to-node traffic.
			DialContext:           (&net.Dialer{Timeout: c.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true, // pass encodings through untouched
		}
	}
	f := &Forwarder{c: c, nodes: nodeCache{maxAge: c.NodeCacheAge}, owners: ownerCache{maxAge: c.OwnerCacheAge}}
	f.rp = &httputil.ReverseProxy{
		Rewrite:        f.rewrite,
		Transport:      c.Transport,
		FlushInterval:  -1, // flush every write: exec output and SSE must not wait in a buffer
		ModifyResponse: f.modifyResponse,
		ErrorHandler:   f.proxyError,
		ErrorLog:       log.New(logfWriter(c.Logf), "forward: ", 0),
		BufferPool:     bufPool{},
	}
	return f
}

// bufPool reuses the proxy's copy buffers (32 KiB each): without it every
// forwarded response allocates one.
type bufPool struct{}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufPool) Get() []byte  { return *copyBufs.Get().(*[]byte) }
func (bufPool) Put(b []byte) { copyBufs.Put(&b) }

// Self is the node's own name.
func (f *Forwarder) Self() string { return f.c.Self }

// Sandbox routes a request for sandbox name (validated by the caller). It
// reads the record (a request made here for a sandbox running on another
// node may instead go to the owner it was last proxied to: see
// ownerCache); see Outcome for what the face does next. An error is the
// face's to answer (in its own format); nothing was written. A sleeping
// sandbox whose owner is draining is moved first (see Mover) when the
// request was made here, not forwarded.
func (f *Forwarder) Sandbox(w http.ResponseWriter, r *http.Request, name string, rt Route) (Outcome, error) {
	ctx := r.Context()
	var replay *replayBody // set once the request was made resendable
	id, forwarded := From(ctx)
	if !forwarded {
		if out, done, err := f.cachedRoute(w, r, name, rt, &replay); done {
			return out, err
		}
	}
	for try := 0; ; try++ {
		readAt := time.Now()
		rec, err := f.c.Records.Get(ctx, name)
		if err != nil {
			if errdefs.IsKind(err, errdefs.ErrNotFound) {
				if forwarded && id.Cached {
					return Local, reroute(ctx, errdefs.Unavailable("sandbox %q, which node %q routed here from its cache, is not found here; retry", name, id.Entry))
				}
				f.owners.drop(name)
				return Missing, nil
			}
			return Local, errdefs.Wrap(errdefs.ErrUnavailable, err, "find the node of sandbox %q: %v", name, err)
		}
		sleeping := f.c.Mover != nil && rec.State == api.StateSleeping
		owner := rec.Owner
		if owner != f.c.Self && forwarded && id.Cached {
			// The entry routed by its cache, which is out of date: it
			// reads the record and routes again.
			return Local, reroute(ctx, errdefs.Unavailable("sandbox %q is owned by node %q, not this one, while node %q routed here from its cache; retry", name, owner, id.Entry))
		}
		if owner == "" {
			f.owners.drop(name)
			return Local, nil
		}
		if owner == f.c.Self {
			f.owners.drop(name)
			switch {
			case !sleeping || (forwarded && !id.Replayable) || try >= maxRoutes || !f.selfDraining(ctx):
			case forwarded:
				// The entry read the sandbox running and can send the
				// request again: it moves the sandbox instead of waking
				// it here, on a node that is being emptied.
				RefuseMoving(ctx)
				return Local, errdefs.Unavailable("sandbox %q is moving off draining node %q; node %q sends the request on", name, f.c.Self, id.Entry)
			default:
				if to, again := f.move(ctx, rec); again || (to != "" && to != f.c.Self) {
					continue // route by the record the move left
				}
			}
			if replay != nil {
				replay.rewind(r)
			}
			return Local, nil
		}
		if forwarded {
			// A forwarded request is served here or refused, never sent on:
			// the sandbox moved while it was in flight.
			return Local, errdefs.Unavailable("sandbox %q moved to node %q while the request from node %q was in flight; retry", name, owner, id.Entry)
		}
		// Whether the owner drains decides a sleeping sandbox's route
		// (Mover): that reads the owner's entry fresh. Otherwise a
		// cached entry will do (nodeCache).
		n, down := f.node(ctx, owner, sleeping)
		if down != nil {
			local, err := f.c.OwnerDown.OwnerDown(ctx, Down{Sandbox: name, Node: owner, Cause: down})
			if errors.Is(err, ErrTakenOver) && try < maxRoutes {
				continue // to the node it was taken over onto
			}
			if local && err == nil {
				if replay != nil {
					replay.rewind(r)
				}
				return Local, nil
			}
			return Local, err
		}
		resend := false
		if f.c.Mover != nil && n.Draining && try < maxRoutes {
			if sleeping {
				to, again := f.move(ctx, rec)
				if to == f.c.Self {
					if replay != nil {
						replay.rewind(r)
					}
					return Local, nil
				}
				if again || to != "" {
					continue
				}
			} else if try < maxRoutes-1 {
				// Running on a draining node: proxied, but resendable if
				// it can be, in case the drain sleeps the sandbox before
				// the owner serves the request (the owner then refuses it
				// as moving, and the next round moves it).
				if replay == nil {
					replay = newReplay(r)
				}
				resend = replay.ok
			}
		}
		if replay != nil {
			replay.rewind(r)
		}
		out, err := f.proxy(w, r, name, n, rt, true, resend, false)
		if errors.Is(err, errMoving) || (errors.Is(err, ErrTakenOver) && try < maxRoutes) {
			continue
		}
		if err == nil && rec.State == api.StateRunning && !n.Draining {
			f.owners.put(name, owner, readAt)
		} else {
			f.owners.drop(name)
		}
		return out, err
	}
}

// cachedRoute sends a request made here to the owner the cache names for
// sandbox name, without reading its record. done false: there is no
// entry, the request's body cannot be held, or the cached owner refused
// or could not be reached; the caller then reads the record and routes
// as usual, with the body rewound (*replay holds it).
func (f *Forwarder) cachedRoute(w http.ResponseWriter, r *http.Request, name string, rt Route, replay **replayBody) (Outcome, bool, error) {
	owner, ok := f.owners.get(name)
	if !ok {
		return Local, false, nil
	}
	rb := newReplay(r)
	*replay = rb
	if !rb.ok {
		return Local, false, nil
	}
	n, down := f.node(r.Context(), owner, false)
	if down != nil {
		f.owners.drop(name)
		return Local, false, nil
	}
	rb.rewind(r)
	out, err := f.proxy(w, r, name, n, rt, true, true, true)
	if errors.Is(err, errRerouted) || errors.Is(err, errMoving) {
		f.owners.drop(name)
		rb.rewind(r)
		return Local, false, nil
	}
	return out, true, err
}

// selfDraining reports whether this node's own entry is draining.
func (f *Forwarder) selfDraining(ctx context.Context) bool {
	me, err := f.c.Nodes.GetNode(ctx, f.c.Self)
	return err == nil && me.Draining
}

// maxReplayBody bounds the request body an entry node holds in memory to
// be able to send a request to a draining owner again.
const maxReplayBody = 1 << 20

// replayBody is a request body the entry holds whole, so the request can
// be sent again (ok false: it cannot be, the body is unbounded or large).
type replayBody struct {
	ok  bool
	buf []byte
	has bool // the request has a body at all
}

// newReplay reads r's body into memory when it is small and of known
// length.
func newReplay(r *http.Request) *replayBody {
	if r.Body == nil || r.Body == http.NoBody {
		return &replayBody{ok: true}
	}
	if r.ContentLength < 0 || r.ContentLength > maxReplayBody {
		return &replayBody{}
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength+1))
	if err != nil || int64(len(buf)) != r.ContentLength {
		// The client's body failed or lied about its length: hand what
		// was read back, unreplayable, and let the owner see the rest.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return &replayBody{}
	}
	return &replayBody{ok: true, buf: buf, has: true}
}

// rewind gives r its body from the start again.
func (b *replayBody) rewind(r *http.Request) {
	if b.ok && b.has {
		r.Body = io.NopCloser(bytes.NewReader(b.buf))
	}
}

// errRerouted is an owner's refusal of a request the entry routed by its
// owner cache (headerRerouted), or a failure to reach the cached owner:
// the entry reads the record and routes the request again.
var errRerouted = errors.New("the cached owner does not own the sandbox (or cannot be reached)")

// reroute marks the answer to a forwarded request that its entry routed
// by its owner cache (Identity.Cached) as a refusal of the route
// (headerRerouted), so the entry routes it again, and returns err.
func reroute(ctx context.Context, err error) error {
	id, _ := From(ctx)
	if h, ok := ctx.Value(movingKey{}).(http.Header); ok && id.nonce != "" {
		h.Set(headerRerouted, id.nonce)
	}
	return err
}

// errMoving is a draining owner's refusal of a replayable request for its
// own sleeping sandbox (headerMoving).
var errMoving = errors.New("the owner is moving the sandbox off itself (draining)")

// move asks the Mover to move rec off its draining owner. It returns the
// new owner ("" when the sandbox stays), or again when the record changed
// under the move and must be read again.
func (f *Forwarder) move(ctx context.Context, rec store.Sandbox) (to string, again bool) {
	to, err := f.c.Mover.Move(ctx, rec)
	switch {
	case errdefs.IsKind(err, errdefs.ErrFailedPrecondition):
		return "", true
	case err != nil:
		f.c.Logf("drain: sandbox %s stays on draining node %s for this request: %v", rec.Name, rec.Owner, err)
		return "", false
	case to == rec.Owner:
		return "", false
	}
	return to, false
}

// Create routes a create: the Placer's node gets it unless that is this
// node. A create that was forwarded here is created here (it was placed).
// The face must have left r.Body readable from the start (it buffered the
// bounded JSON body to parse req).
func (f *Forwarder) Create(w http.ResponseWriter, r *http.Request, req api.CreateSandboxRequest, rt Route) (Outcome, error) {
	ctx := r.Context()
	if f.c.Placer == nil || Forwarded(ctx) {
		return Local, nil
	}
	node, err := f.c.Placer.Place(ctx, req)
	if err != nil {
		return Local, err
	}
	if node == "" || node == f.c.Self {
		return Local, nil
	}
	n, down := f.node(ctx, node, false)
	if down != nil {
		return Local, errdefs.Wrap(errdefs.ErrUnavailable, down, "placement chose node %q for the new sandbox, which cannot be reached (%v); retry", node, down)
	}
	return f.proxy(w, r, req.Name, n, rt, false, false, false)
}

// state is one forwarded request's, from Sandbox to the proxy's hooks.
type state struct {
	base    *url.URL
	node    string
	sandbox string
	rt      Route
	body    *trackedBody
	resend  bool   // the entry can send the request again (headerReplay)
	cached  bool   // routed by the owner cache (headerCached)
	nonce   string // a resendable request's: the owner's refusal must echo it
	err     error  // the proxy failed before any answer was written
}

type stateKey struct{}

// proxy sends r to node n. resend says the caller can send it again (its
// body is held whole): the request then says so to the owner, and the
// owner's moving refusal comes back as errMoving with nothing written.
// cached says the owner came from the owner cache (resend is then true):
// the owner's refusal of the route, or any failure to reach it, comes
// back as errRerouted with nothing written.
func (f *Forwarder) proxy(w http.ResponseWriter, r *http.Request, sandbox string, n store.Node, rt Route, owned, resend, cached bool) (Outcome, error) {
	base, err := url.Parse(n.Addr)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return Local, errdefs.Unavailable("node %q has a bad address %q in its entry", n.Name, n.Addr)
	}
	st := &state{base: base, node: n.Name, sandbox: sandbox, rt: rt, resend: resend, cached: cached}
	if resend || cached {
		st.nonce = rand.Text()
	}
	in := r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	if r.Body != nil && r.Body != http.NoBody {
		st.body = &trackedBody{rc: r.Body}
		in.Body = st.body
	}
	f.rp.ServeHTTP(w, in)
	if st.err == nil {
		return Proxied, nil
	}
	if r.Context().Err() != nil {
		return Proxied, nil // the client left; nobody to answer
	}
	if errors.Is(st.err, errMoving) {
		return Local, errMoving
	}
	if errors.Is(st.err, errRerouted) {
		return Local, errRerouted // the owner answered: its entry is good
	}
	f.nodes.drop(n.Name) // it failed: the next request reads the entry again
	if cached {
		// Routed by the cache: read the record and route again (the
		// caller holds the body).
		return Local, errRerouted
	}
	if !owned {
		return Local, errdefs.Wrap(errdefs.ErrUnavailable, st.err, "node %q, chosen for the new sandbox, cannot be reached (%v); retry", n.Name, st.err)
	}
	local, err := f.c.OwnerDown.OwnerDown(r.Context(), Down{Sandbox: sandbox, Node: n.Name, Cause: st.err})
	if (local && err == nil) || errors.Is(err, ErrTakenOver) {
		if st.body != nil && st.body.read {
			// The owner took part of the body; it cannot be served again.
			return Local, errdefs.Wrap(errdefs.ErrUnavailable, st.err, "node %q failed while reading the request (%v); retry", n.Name, st.err)
		}
		if st.body != nil {
			r.Body = st.body.rc
		}
		return Local, err // nil, or ErrTakenOver: Sandbox sends it to the new owner
	}
	return Local, err
}

func (f *Forwarder) rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(stateKey{}).(*state)
	out, in := pr.Out, pr.In
	prefix := strings.TrimSuffix(st.base.Path, "/") + Prefix + "/" + string(st.rt.Face)
	out.URL.Scheme, out.URL.Host = st.base.Scheme, st.base.Host
	out.URL.Path = prefix + in.URL.Path
	out.URL.RawPath = prefix + in.URL.EscapedPath()
	out.Host = ""
	h := out.Header
	StripHeaders(h)
	auth := h.Get("Authorization")
	h.Set(HeaderCaller, Fingerprint(auth))
	h.Del("Authorization")
	h.Del("X-Api-Key") // the E2B face's user key: checked at the entry
	if st.rt.KeepAuthorization && auth != "" {
		h.Set(headerAuthorization, auth)
	}
	h.Set("Authorization", "Bearer "+f.c.Token)
	h.Set(HeaderHop, "1")
	h.Set(headerEntry, f.c.Self)
	h.Set(HeaderOwner, st.node)
	h.Set(HeaderHost, in.Host)
	if in.RemoteAddr != "" {
		h.Set(HeaderClient, in.RemoteAddr)
	}
	if t := policy.TenantFrom(in.Context()); t != "" {
		h.Set(HeaderTenant, t)
	}
	if st.rt.KeyVerified {
		h.Set(HeaderKey, "1")
	}
	if st.resend {
		h.Set(headerReplay, st.nonce)
	}
	if st.cached {
		h.Set(headerCached, st.nonce)
	}
	if id := reqinfo.ID(in.Context()); id != "" {
		h.Set(reqinfo.Header, id)
	}
}

// modifyResponse turns the receiver's own refusals (a wrong cluster
// credential, a bad path: marked with headerRefused) into a proxy error,
// so the user sees "node X refused", not a 401 that reads as their key.
func (f *Forwarder) modifyResponse(resp *http.Response) error {
	if v := resp.Header.Get(headerRerouted); v != "" {
		// Only the owner's own refusal echoes the request's nonce: a
		// sandbox's app behind a preview never sees it, so a header it
		// sets cannot make the entry send its request twice.
		if st, _ := resp.Request.Context().Value(stateKey{}).(*state); st != nil && st.cached &&
			subtle.ConstantTimeCompare([]byte(v), []byte(st.nonce)) == 1 {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			return errRerouted
		}
		resp.Header.Del(headerRerouted) // never shown to a client
	}
	if v := resp.Header.Get(headerMoving); v != "" {
		// As with headerRerouted: only the owner's refusal echoes the
		// request's nonce, so an app cannot make the entry resend.
		if st, _ := resp.Request.Context().Value(stateKey{}).(*state); st != nil && st.resend &&
			subtle.ConstantTimeCompare([]byte(v), []byte(st.nonce)) == 1 {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			return errMoving
		}
		resp.Header.Del(headerMoving) // never shown to a client
	}
	if resp.Header.Get(headerRefused) == "" {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	return errRefused{status: resp.StatusCode, body: strings.TrimSpace(string(body))}
}

type errRefused struct {
	status int
	body   string
}

func (e errRefused) Error() string {
	return "it refused the forwarded request (" + http.StatusText(e.status) + ": " + e.body + ")"
}

func (f *Forwarder) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	st := r.Context().Value(stateKey{}).(*state)
	if errors.Is(err, errMoving) || errors.Is(err, errRerouted) {
		st.err = err
		return
	}
	if r.Context().Err() == nil {
		f.c.Logf("forward %s %s to node %s: %v", r.Method, r.URL.Path, st.node, err)
	}
	var ref errRefused
	if errors.As(err, &ref) {
		st.err = ref
		return
	}
	st.err = err
}

// trackedBody records whether the proxy read any of the request body, so
// that a failed forward is served locally only when nothing was consumed.
type trackedBody struct {
	rc   io.ReadCloser
	read bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.read = true
	}
	return n, err
}

// Close does not close the original body: the face may still serve the
// request (OwnerDown chose local) and net/http closes it in the end.
func (b *trackedBody) Close() error { return nil }

type logfWriter func(format string, args ...any)

func (f logfWriter) Write(b []byte) (int, error) {
	f("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

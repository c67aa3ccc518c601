package placement

import (
	"context"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// NodeCacheMaxAge is the default bound on how old the cached node list may
// be. A second is a fraction of the 10 s staleness bound and of a node's
// heartbeat period, so the cache adds little to what the store already
// lags by, while a control plane placing hundreds of sandboxes a second
// reads the node table once a second instead of once per decision.
const NodeCacheMaxAge = time.Second

// Source is where NodeCache reads; store.Cluster has it.
type Source interface {
	Nodes(ctx context.Context) ([]store.Node, error)
	GetNode(ctx context.Context, name string) (store.Node, error)
	Now(ctx context.Context) (time.Time, error)
}

// NodeCache is one control-plane process's view of the node list for
// placement: read from the store at most every MaxAge, with the process's
// own placements applied on top until the nodes report them.
//
// Nodes rewrite their entry on each heartbeat, so a placement shows in
// InFlight and Committed only once its node heartbeats again. Without a
// correction every decision in between would see the same load and pick
// the same node. Placed records a decision; the cache adds it to its node's
// InFlight and Committed in every view until that node's entry carries a
// heartbeat newer than the decision (the node's own report then counts
// it). Placements by other processes are not seen until the nodes report
// them; the random spread among near-best nodes is what keeps concurrent
// processes apart.
//
// The store's now is read with the node list and advanced on this
// process's monotonic clock in between, so a view needs no query at all.
type NodeCache struct {
	src    Source
	maxAge time.Duration
	clock  func() time.Time // time.Now; tests move it

	mu         sync.Mutex
	nodes      []store.Node
	byName     map[string]int
	storeNow   time.Time // the store's now, read just after the nodes
	readAt     time.Time // clock() when storeNow came back
	sentAt     time.Time // clock() when the read began: the list's age counts from here
	refreshing chan struct{}
	pending    []placed
}

type placed struct {
	node string
	res  store.NodeResources
	at   time.Time // estimated store time of the decision
}

// pendingMax bounds how long an unreported placement is applied: a node
// that stops heartbeating is stale for placement long before it.
const pendingMax = time.Minute

// NewNodeCache returns a cache over src; maxAge 0 is NodeCacheMaxAge.
func NewNodeCache(src Source, maxAge time.Duration) *NodeCache {
	if maxAge <= 0 {
		maxAge = NodeCacheMaxAge
	}
	return &NodeCache{src: src, maxAge: maxAge, clock: time.Now}
}

// staleServe is how many MaxAges old a list may be and still be served
// while a fresh one is read behind the caller: one slow read (1,000 rows
// of layer maps decode in tens of milliseconds) then delays no decision,
// and the list stays well within the 10 s staleness bound.
const staleServe = 3

// Nodes returns the node list with this process's unreported placements
// applied, and the store's now. The list is at most MaxAge old (counted
// from when its read was sent); past that,
// and up to 3×MaxAge, it is still served while one caller's refresh reads
// the store in the background; older (or after Invalidate) the caller
// waits for a read. The slice is the caller's; the maps inside the entries
// are shared and must not be changed.
func (c *NodeCache) Nodes(ctx context.Context) ([]store.Node, time.Time, error) {
	c.mu.Lock()
	for {
		age := c.clock().Sub(c.sentAt)
		if c.nodes != nil && age < staleServe*c.maxAge {
			if age >= c.maxAge && c.refreshing == nil {
				// The caller's deadline must not cut a read that other
				// callers will use; the read gets its own bound.
				bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), staleServe*c.maxAge)
				ch := c.beginLocked()
				go func() {
					defer cancel()
					_ = c.refresh(bg, ch) // on error the list ages out and a caller reads it
				}()
			}
			nodes, now := c.view()
			c.mu.Unlock()
			return nodes, now, nil
		}
		if ch := c.refreshing; ch != nil {
			// Another caller is reading: wait for its result rather than
			// sending the same query twice.
			c.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, time.Time{}, errdefs.Unavailable("placement: waiting for the node list: %w", ctx.Err())
			}
			c.mu.Lock()
			continue
		}
		ch := c.beginLocked()
		c.mu.Unlock()
		if err := c.refresh(ctx, ch); err != nil {
			return nil, time.Time{}, err
		}
		c.mu.Lock()
		if c.nodes != nil {
			// What this call read is served even if the read took longer
			// than the age bound (a slow store must not loop us).
			nodes, now := c.view()
			c.mu.Unlock()
			return nodes, now, nil
		}
		// Invalidated while reading: read again.
	}
}

func (c *NodeCache) beginLocked() chan struct{} {
	ch := make(chan struct{})
	c.refreshing = ch
	return ch
}

// refresh reads the store and installs the result; ch is the one
// beginLocked made, closed when the read is over.
func (c *NodeCache) refresh(ctx context.Context, ch chan struct{}) error {
	sent := c.clock()
	nodes, now, err := c.read(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = nil
	close(ch)
	if err != nil {
		return err
	}
	c.nodes, c.storeNow, c.readAt, c.sentAt = nodes, now, c.clock(), sent
	c.byName = make(map[string]int, len(nodes))
	for i, n := range nodes {
		c.byName[n.Name] = i
	}
	return nil
}

func (c *NodeCache) read(ctx context.Context) ([]store.Node, time.Time, error) {
	// Nodes before Now: every heartbeat read is then at most now, so a
	// decision made after this read is later than every heartbeat in it
	// and Placed's correction holds until the node's next one.
	nodes, err := c.src.Nodes(ctx)
	if err != nil {
		return nil, time.Time{}, errdefs.Unavailable("placement: read the node list: %w", err)
	}
	now, err := c.src.Now(ctx)
	if err != nil {
		return nil, time.Time{}, errdefs.Unavailable("placement: read the store's clock: %w", err)
	}
	return nodes, now, nil
}

// Placed records that this process placed a sandbox needing res on node,
// so that later views count it until the node reports it.
func (c *NodeCache) Placed(node string, res store.NodeResources) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, placed{node: node, res: res, at: c.nowLocked()})
}

// Fresh reads one node's entry from the store and puts it in the cached
// list, so that what changed on it since the list was read (a drain above
// all, which the operator expects to hold at once) shows in the next view.
// The Placer calls it for the node it picked: one row, where a refresh
// reads every node's. An entry that is gone is not found, and the next
// Nodes reads the whole list again.
func (c *NodeCache) Fresh(ctx context.Context, name string) (store.Node, error) {
	n, err := c.src.GetNode(ctx, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errdefs.IsKind(err, errdefs.ErrNotFound):
		c.nodes = nil
		return store.Node{}, err
	case err != nil:
		return store.Node{}, errdefs.Unavailable("placement: read node %q: %w", name, err)
	}
	if i, ok := c.byName[name]; ok && c.nodes != nil {
		c.nodes[i] = n // views copy the slice, so no earlier view sees this
	}
	return n, nil
}

// Invalidate makes the next Nodes read the store (after a node refused a
// placement, say, so that its fresh entry is seen).
func (c *NodeCache) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = nil
}

func (c *NodeCache) nowLocked() time.Time {
	if c.readAt.IsZero() {
		return time.Time{}
	}
	return c.storeNow.Add(c.clock().Sub(c.readAt))
}

// view copies the cached list and applies the pending placements whose
// node has not heartbeaten since; it drops the ones that are reported (or
// too old, or on a node that left). A heartbeat at the very instant of the
// decision (stores keep milliseconds) is taken to predate it: counting a
// create twice for one heartbeat period is the cheaper mistake.
func (c *NodeCache) view() ([]store.Node, time.Time) {
	now := c.nowLocked()
	out := make([]store.Node, len(c.nodes))
	copy(out, c.nodes)
	keep := c.pending[:0]
	for _, p := range c.pending {
		i, ok := c.byName[p.node]
		if !ok || out[i].Heartbeat.After(p.at) || now.Sub(p.at) > pendingMax {
			continue
		}
		n := &out[i]
		n.InFlight++
		n.Committed.MilliCPU += p.res.MilliCPU
		n.Committed.MemoryBytes += p.res.MemoryBytes
		n.Committed.DiskBytes += p.res.DiskBytes
		keep = append(keep, p)
	}
	clear(c.pending[len(keep):])
	c.pending = keep
	return out, now
}

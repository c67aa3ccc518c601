package forward

import (
	"context"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// DefaultNodeCacheAge bounds how old a node entry the Forwarder routes a
// running sandbox's request by may be (Config.NodeCacheAge). It is
// placement's bound on its node list too (placement.NodeCacheMaxAge).
const DefaultNodeCacheAge = time.Second

// nodeCache keeps the node entries (and the store's clock at the read)
// the Forwarder last read, so that a forwarded request reads only the
// sandbox's record, not also the owner's entry and the store's clock.
//
// What it may serve is bounded so that it never changes a decision for
// longer than maxAge, and never toward "down":
//   - an entry older than maxAge is read again;
//   - the owner's heartbeat age is judged against the store's clock as it
//     was at the read plus the time since, on this process's monotonic
//     clock; a cached entry that looks stale is read again before the
//     owner is called down (the verdict "down" always comes from a fresh
//     read);
//   - a failed forward drops the entry, so the next request reads it;
//   - a request whose routing depends on Draining for a sleeping sandbox
//     (Mover) reads fresh (see Sandbox).
type nodeCache struct {
	maxAge time.Duration
	mu     sync.Mutex
	m      map[string]cachedNode
}

type cachedNode struct {
	n       store.Node
	storeAt time.Time // the store's clock at the read (zero without Staleness)
	readAt  time.Time // this process's clock at the read (monotonic)
}

func (c *nodeCache) get(name string) (cachedNode, bool) {
	if c.maxAge <= 0 {
		return cachedNode{}, false
	}
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if !ok || time.Since(e.readAt) >= c.maxAge {
		return cachedNode{}, false
	}
	return e, true
}

func (c *nodeCache) put(e cachedNode) {
	if c.maxAge <= 0 {
		return
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]cachedNode{}
	}
	c.m[e.n.Name] = e
	c.mu.Unlock()
}

func (c *nodeCache) drop(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// node returns the entry of node name, or why it counts as down. fresh
// reads the store whatever the cache holds.
func (f *Forwarder) node(ctx context.Context, name string, fresh bool) (store.Node, error) {
	if !fresh {
		if e, ok := f.nodes.get(name); ok {
			if f.c.Staleness <= 0 || e.storeAt.Add(time.Since(e.readAt)).Sub(e.n.Heartbeat) <= f.c.Staleness {
				return e.n, nil
			}
			// Looks stale from the cache: only a fresh read calls it down.
		}
	}
	n, err := f.c.Nodes.GetNode(ctx, name)
	if err != nil {
		f.nodes.drop(name)
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			return store.Node{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "the node has no entry in the cluster")
		}
		return store.Node{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "read its node entry: %v", err)
	}
	readAt := time.Now()
	if n.Addr == "" {
		f.nodes.drop(name)
		return store.Node{}, errdefs.Unavailable("its node entry has no address")
	}
	var now time.Time
	if f.c.Staleness > 0 {
		if now, err = f.c.Nodes.Now(ctx); err != nil {
			return store.Node{}, errdefs.Wrap(errdefs.ErrUnavailable, err, "read the store's clock: %v", err)
		}
		if age := now.Sub(n.Heartbeat); age > f.c.Staleness {
			f.nodes.drop(name)
			return store.Node{}, errdefs.Unavailable("its last heartbeat is %s old", age.Round(time.Second))
		}
	}
	f.nodes.put(cachedNode{n: n, storeAt: now, readAt: readAt})
	return n, nil
}

// DefaultOwnerCacheAge bounds how long the Forwarder routes requests for
// a sandbox by the owner it last read (Config.OwnerCacheAge).
const DefaultOwnerCacheAge = 2 * time.Second

// maxCachedOwners bounds the owner cache; a full cache starts over.
const maxCachedOwners = 4096

// ownerCache remembers, per sandbox, the other node a request was last
// proxied to, so the next request skips the record read at the entry.
// It is safe because the owner reads the record itself on every request
// it is sent (Sandbox, on the owner's side) and refuses, marked
// (headerRerouted), one for a sandbox it does not own any more; the
// entry then reads the record and routes again in the same request. A
// request is routed by the cache only when the entry holds its whole
// body (replayBody), so it can always be sent again.
type ownerCache struct {
	maxAge time.Duration
	mu     sync.Mutex
	m      map[string]cachedOwner
}

type cachedOwner struct {
	owner  string
	readAt time.Time
}

func (c *ownerCache) get(name string) (string, bool) {
	if c.maxAge <= 0 {
		return "", false
	}
	c.mu.Lock()
	e, ok := c.m[name]
	c.mu.Unlock()
	if !ok || time.Since(e.readAt) >= c.maxAge {
		return "", false
	}
	return e.owner, true
}

func (c *ownerCache) put(name, owner string, readAt time.Time) {
	if c.maxAge <= 0 {
		return
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedOwners {
		c.m = map[string]cachedOwner{}
	}
	c.m[name] = cachedOwner{owner: owner, readAt: readAt}
	c.mu.Unlock()
}

func (c *ownerCache) drop(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

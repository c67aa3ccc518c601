package store

import (
	"context"
	"time"
)

// Node is one berth process's entry in the cluster's membership: what it
// offers, what it holds, and when it last said so. Nodes write their own
// entry (PutNode on every heartbeat); placement and `berth node ls` read
// them all. A node's entry is its own claim, not a fact: the control plane
// checks what it can (a node that claims an image it lacks costs a pull,
// never a wrong answer).
type Node struct {
	Name string // unique in the cluster; defaults to the host name
	// Addr is the node API's base URL (https://host:port or http://...),
	// where other processes reach this node's node.Node.
	Addr string
	// Roles holds "control", "node" or both.
	Roles []string

	// Capacity is what the node offers; Committed is the sum of the
	// resources of the sandboxes it runs or has placed and is starting.
	Capacity  NodeResources
	Committed NodeResources
	// InFlight counts creates and wakes placed on the node and not yet
	// running (anti-herding: placement avoids piling onto one node).
	InFlight int

	Isolation []string          // api.IsolationRunc, api.IsolationGVisor
	Labels    map[string]string // operator-given, for placement constraints

	// Images are the image digests the node has unpacked; Layers the
	// snapshot layers in its cache, sha256 hex to compressed bytes.
	Images []string
	Layers map[string]int64

	// Draining nodes take no new placements (berth node drain).
	Draining bool

	// Epoch counts the node's joins: it grows each time the process
	// starts (PutNode with a new StartedAt), so a node that restarts is
	// told apart from one that merely kept heartbeating.
	Epoch     int64
	StartedAt time.Time
	// Heartbeat is when the store last took PutNode for this node, in
	// the store's clock (not the node's), so a node with a wrong clock
	// cannot keep itself alive or make others look dead.
	Heartbeat time.Time
}

// NodeResources is an amount of compute: CPU in millicores, memory and
// disk in bytes.
type NodeResources struct {
	MilliCPU    int64
	MemoryBytes int64
	DiskBytes   int64
}

// Lease is a time-bound claim on a key (a durable object "class/id", a
// sandbox, a singleton job) by one holder. Epoch grows every time the key
// changes holder, never on renewal, so anything the holder writes can be
// made conditional on (Key, Holder, Epoch) and a holder that lost the lease
// while paused cannot write after it resumes.
type Lease struct {
	Key     string
	Holder  string
	Epoch   int64
	Expires time.Time // in the store's clock
}

// Cluster is the membership and coordination state of a cluster: node
// entries and leases. The SQLite store implements it for a single host
// (one node, leases that never contend); the PostgreSQL store for a real
// cluster, where every time is the database server's clock.
type Cluster interface {
	// PutNode inserts or replaces the node's entry and sets Heartbeat to
	// the store's now. A new StartedAt (a restarted process) bumps Epoch;
	// the same StartedAt keeps it. Draining is kept as stored (only
	// SetNodeDraining changes it). It returns the stored entry.
	PutNode(ctx context.Context, n Node) (Node, error)
	// Nodes returns every entry, ordered by name, with Heartbeat as
	// stored; callers decide staleness against Now.
	Nodes(ctx context.Context) ([]Node, error)
	// GetNode returns one entry, or an errdefs not-found error.
	GetNode(ctx context.Context, name string) (Node, error)
	// SetNodeDraining sets or clears a node's Draining; not found if the
	// node never registered.
	SetNodeDraining(ctx context.Context, name string, draining bool) error
	// DeleteNode removes an entry (berth node rm of a node that is gone).
	DeleteNode(ctx context.Context, name string) error

	// AcquireLease gives key to holder for ttl if it is free, expired, or
	// already the holder's (then it is a renewal and Epoch stays). If
	// another holder has it unexpired, it returns errdefs already-exists
	// together with the current lease. Taking it from another holder (or
	// a free key) bumps Epoch past every epoch the key ever had. ttl must
	// be positive (invalid argument otherwise).
	AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (Lease, error)
	// RenewLease extends l by ttl only if key is still held by l.Holder at
	// l.Epoch (expired but not yet taken counts as held); otherwise it
	// returns errdefs failed-precondition and the holder must stop acting.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease frees key if it is still l's (same holder and epoch);
	// releasing a lease that is no longer held is not an error. The epoch
	// is remembered, so the next holder's epoch is still higher.
	ReleaseLease(ctx context.Context, l Lease) error
	// GetLease returns the current lease of key (possibly expired), or
	// not found if nobody ever held it or it was released.
	GetLease(ctx context.Context, key string) (Lease, error)

	// Now is the store's clock, the one Heartbeat and Expires use.
	Now(ctx context.Context) (time.Time, error)
}

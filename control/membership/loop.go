package membership

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store"
)

// Reporter is what the loop reads the node's claim from: node.Node's
// Info (the in-process node, or one behind node/remote).
type Reporter interface {
	Info(ctx context.Context) (node.Info, error)
}

// Config is this process's part of its entry.
type Config struct {
	// Name is unique in the cluster (DefaultName: the host name).
	Name string
	// Addr is the node API's base URL; "" while the process serves no
	// node API (a single host).
	Addr string
	// Roles from ParseRole; nil: both.
	Roles  []string
	Labels map[string]string
	// Interval between heartbeats (DefaultInterval); it must be under
	// half of Stale (ValidateTiming).
	Interval time.Duration
	Stale    time.Duration // DefaultStale
	// StartedAt is the process's start: a new one is a new join (the
	// store bumps the entry's epoch). Zero: when New is called.
	StartedAt time.Time
	Logf      func(format string, args ...any)
}

// Loop writes this process's entry: Beat once, Run forever.
type Loop struct {
	cluster store.Cluster
	node    Reporter
	cfg     Config

	mu       sync.Mutex
	last     node.Info // the last Info that succeeded
	haveLast bool
	failures int       // heartbeats failed in a row
	written  time.Time // when an entry was last written (this process's clock)
}

// New checks c (name, roles, labels, timing) and returns its loop.
func New(cluster store.Cluster, n Reporter, c Config) (*Loop, error) {
	if cluster == nil || n == nil {
		return nil, errdefs.InvalidArgument("membership: a store and a node are needed")
	}
	if err := api.ValidateNodeName(c.Name); err != nil {
		return nil, err
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Stale == 0 {
		c.Stale = DefaultStale
	}
	if err := ValidateTiming(c.Interval, c.Stale); err != nil {
		return nil, err
	}
	if len(c.Roles) == 0 {
		c.Roles, _ = ParseRole("all")
	}
	for _, r := range c.Roles {
		if r != api.RoleControl && r != api.RoleNode {
			return nil, errdefs.InvalidArgument("membership: unknown role %q", r)
		}
	}
	if err := api.ValidateLabels(c.Labels); err != nil {
		return nil, err
	}
	if c.StartedAt.IsZero() {
		c.StartedAt = time.Now()
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return &Loop{cluster: cluster, node: n, cfg: c}, nil
}

// Name is the node's name in the cluster.
func (l *Loop) Name() string { return l.cfg.Name }

// Beat writes the entry once and returns it as stored. The node's Info is
// asked first; when it fails the heartbeat still goes out with the last
// Info that succeeded (liveness is about the process and its store, and a
// node that cannot count its sandboxes for a moment is not dead), and the
// error is returned beside the stored entry. A store error is returned
// alone. Each call is bounded by the interval, so a hung store or node
// cannot hold the loop past its next turn.
func (l *Loop) Beat(ctx context.Context) (store.Node, error) {
	n, _, err := l.beat(ctx)
	return n, err
}

// beat is Beat that also tells whether the entry was written.
func (l *Loop) beat(ctx context.Context) (store.Node, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Interval)
	defer cancel()
	in, infoErr := l.node.Info(ctx)
	l.mu.Lock()
	if infoErr == nil {
		l.last, l.haveLast = in, true
	} else {
		in = l.last
	}
	l.mu.Unlock()
	stored, err := l.cluster.PutNode(ctx, l.entry(in))
	if err != nil {
		return store.Node{}, false, errdefs.Unavailable("heartbeat of node %q: %w", l.cfg.Name, err)
	}
	if infoErr != nil {
		return stored, true, errdefs.Unavailable("heartbeat of node %q went out with its last report: node info: %w", l.cfg.Name, infoErr)
	}
	return stored, true, nil
}

// entry is the node's claim from in, in store units.
func (l *Loop) entry(in node.Info) store.Node {
	n := store.Node{
		Name: l.cfg.Name, Addr: l.cfg.Addr, Roles: l.cfg.Roles, Labels: l.cfg.Labels,
		Capacity: store.NodeResources{
			MilliCPU:    milli(in.Capacity.VCPU),
			MemoryBytes: in.Capacity.MemoryMiB << 20,
			DiskBytes:   in.Capacity.DiskMB * 1000 * 1000, // instance disks are decimal MB
		},
		Committed: store.NodeResources{
			MilliCPU:    milli(in.Capacity.UsedVCPU),
			MemoryBytes: in.Capacity.UsedMemoryMiB << 20,
			DiskBytes:   in.Capacity.UsedDiskMB * 1000 * 1000,
		},
		InFlight:  in.Capacity.InFlight,
		Isolation: in.Isolation,
		Images:    in.Images,
		StartedAt: l.cfg.StartedAt,
	}
	if len(in.SnapshotLayers) > 0 {
		n.Layers = make(map[string]int64, len(in.SnapshotLayers))
		for _, d := range in.SnapshotLayers {
			// The entry keys layers by bare hex; a size the node could
			// not tell is 0 (held, weight unknown).
			n.Layers[strings.TrimPrefix(d, "sha256:")] = in.SnapshotLayerBytes[d]
		}
	}
	return n
}

func milli(vcpu float64) int64 { return int64(math.Round(vcpu * 1000)) }

// Run beats every interval until ctx ends (call Beat first for the entry
// on start). A failed heartbeat is retried sooner, a quarter interval
// after the first failure and doubling up to the interval, and logged
// with backoff too: the first failure, then the 2nd, 4th, 8th … in a row,
// and the recovery. It never returns an error: losing the store is not a
// reason for a node to stop serving what it runs.
func (l *Loop) Run(ctx context.Context) {
	wait := l.cfg.Interval
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = l.turn(ctx)
	}
}

// Start beats once now (a failure is logged, never fatal) and runs the
// loop on its own goroutine until ctx ends.
func (l *Loop) Start(ctx context.Context) {
	l.turn(ctx)
	go l.Run(ctx)
}

// turn is one heartbeat with its logging; it returns the wait before the
// next one.
func (l *Loop) turn(ctx context.Context) time.Duration {
	_, written, err := l.beat(ctx)
	if ctx.Err() != nil {
		return l.cfg.Interval
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if written {
		l.written = time.Now()
	}
	if err == nil {
		if l.failures > 0 {
			l.cfg.Logf("membership: heartbeat of node %q recovered after %d failed", l.cfg.Name, l.failures)
		}
		l.failures = 0
		return l.cfg.Interval
	}
	l.failures++
	if l.failures&(l.failures-1) == 0 { // 1, 2, 4, 8, …
		l.cfg.Logf("membership: %v (%d in a row; retrying)", err, l.failures)
	}
	if written {
		// Only the node's report failed; the entry is fresh, so the
		// next heartbeat need not hurry.
		return l.cfg.Interval
	}
	wait := l.cfg.Interval / 4
	for i := 1; i < l.failures && wait < l.cfg.Interval; i++ {
		wait *= 2
	}
	return min(wait, l.cfg.Interval)
}

// SinceWritten is how long ago, on this process's monotonic clock, the
// loop last wrote the entry (by Start or Run); the whole run when it never
// did. Past the staleness bound the others count this node as dead, and it
// must act as if it were (the daemon then refuses work).
func (l *Loop) SinceWritten() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written.IsZero() {
		return time.Since(l.cfg.StartedAt)
	}
	return time.Since(l.written)
}

// Failures is how many heartbeats have failed in a row.
func (l *Loop) Failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures
}

package local

import (
	"context"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// The start gate: admission control for bursts. At most Limit sandbox
// starts (creates and wakes; not warm-pool claims, which are cheap) run
// at once on this node. The rest wait in a queue that is fair between
// tenants (round robin over the tenants that wait, first come first
// served within one), so a tenant that sends a thousand creates does not
// starve another's one. Past MaxQueue waiting, or after MaxWait in the
// queue, a start is refused with errdefs.TryLater (429 with Retry-After
// on the API), before anything of the sandbox is made. Pool refills take
// a slot only while nobody waits (acquireIdle).

// GateConfig bounds concurrent starts.
type GateConfig struct {
	// Limit is how many starts run at once; 0: 2 per CPU, at least 2.
	Limit int
	// MaxQueue is how many starts may wait; 0: 1024; negative: none (a
	// start beyond Limit is refused at once).
	MaxQueue int
	// MaxWait is how long a start may wait in the queue; 0: 30 s.
	MaxWait time.Duration
}

type startGate struct {
	cfg     GateConfig
	mu      sync.Mutex
	running int
	queued  int
	queues  map[string][]*gateWaiter // by tenant, FIFO
	order   []string                 // tenants with waiters, round robin
	avg     time.Duration            // moving average of a slot's hold time
	idle    chan struct{}            // closed and renewed when a slot frees
}

type gateWaiter struct {
	ready   chan struct{}
	granted bool
}

func newStartGate(c GateConfig, cpus int) *startGate {
	if c.Limit <= 0 {
		c.Limit = max(2, 2*cpus)
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 1024
	}
	if c.MaxQueue < 0 {
		c.MaxQueue = 0
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 30 * time.Second
	}
	return &startGate{cfg: c, queues: map[string][]*gateWaiter{}, avg: time.Second, idle: make(chan struct{})}
}

// queueDepth is how many starts wait for a slot now.
func (g *startGate) queueDepth() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queued
}

// acquire waits for a start slot for tenant and returns its release.
func (g *startGate) acquire(ctx context.Context, tenant string) (func(), error) {
	g.mu.Lock()
	if g.running < g.cfg.Limit && g.queued == 0 {
		g.running++
		g.mu.Unlock()
		return g.releaser(), nil
	}
	if g.queued >= g.cfg.MaxQueue {
		d := g.retryAfterLocked()
		n := g.queued
		g.mu.Unlock()
		return nil, errdefs.TryLater(d, "this node is starting %d sandboxes and %d more wait, its bound: try again later", g.cfg.Limit, n)
	}
	w := &gateWaiter{ready: make(chan struct{})}
	if len(g.queues[tenant]) == 0 {
		g.order = append(g.order, tenant)
	}
	g.queues[tenant] = append(g.queues[tenant], w)
	g.queued++
	g.mu.Unlock()

	t := time.NewTimer(g.cfg.MaxWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return g.releaser(), nil
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	if w.granted { // granted as the wait ended: keep it
		g.mu.Unlock()
		return g.releaser(), nil
	}
	g.removeLocked(tenant, w)
	d := g.retryAfterLocked()
	g.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, errdefs.Wrap(errdefs.ErrUnavailable, err, "gave up waiting for a start slot")
	}
	return nil, errdefs.TryLater(d, "waited %s for one of this node's %d start slots: try again later", g.cfg.MaxWait, g.cfg.Limit)
}

// acquireIdle waits until a slot is free and nobody waits for one, and
// takes it: the lowest priority, for pool refills.
func (g *startGate) acquireIdle(ctx context.Context) (func(), error) {
	for {
		g.mu.Lock()
		if g.running < g.cfg.Limit && g.queued == 0 {
			g.running++
			g.mu.Unlock()
			return g.releaser(), nil
		}
		idle := g.idle
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-idle:
		}
	}
}

func (g *startGate) releaser() func() {
	t0 := time.Now()
	var once sync.Once
	return func() { once.Do(func() { g.release(time.Since(t0)) }) }
}

// release frees a slot and hands it to the next waiter, round robin over
// tenants.
func (g *startGate) release(held time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.avg = (g.avg*7 + held) / 8
	g.running--
	for g.queued > 0 && g.running < g.cfg.Limit {
		tenant := g.order[0]
		q := g.queues[tenant]
		w := q[0]
		g.queues[tenant] = q[1:]
		g.order = g.order[1:]
		if len(q) > 1 {
			g.order = append(g.order, tenant) // its next waits its turn
		} else {
			delete(g.queues, tenant)
		}
		g.queued--
		g.running++
		w.granted = true
		close(w.ready)
	}
	close(g.idle)
	g.idle = make(chan struct{})
}

func (g *startGate) removeLocked(tenant string, w *gateWaiter) {
	q := g.queues[tenant]
	for i, x := range q {
		if x == w {
			g.queues[tenant] = append(q[:i:i], q[i+1:]...)
			g.queued--
			break
		}
	}
	if len(g.queues[tenant]) == 0 {
		delete(g.queues, tenant)
		for i, t := range g.order {
			if t == tenant {
				g.order = append(g.order[:i:i], g.order[i+1:]...)
				break
			}
		}
	}
}

// retryAfterLocked estimates when a retry finds room: the queue ahead
// drained at Limit starts per average start time.
func (g *startGate) retryAfterLocked() time.Duration {
	waves := g.queued/g.cfg.Limit + 1
	return time.Duration(waves) * g.avg
}

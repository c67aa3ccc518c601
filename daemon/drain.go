package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
)

// Draining a node (berth node drain) in cluster mode:
//
//   - placement puts nothing new on it (control/placement);
//   - the node itself puts its running sandboxes to sleep, drainBatch at
//     a time on each heartbeat (drainer), through the normal sleep, which
//     in cluster mode persists each one's files to the blob store;
//   - a request for one of its sleeping sandboxes, made at any member, is
//     not proxied to it: that member moves the sandbox (moveOff, a
//     version-conditional store.TakeoverSleeping) to itself when it runs
//     sandboxes and is not draining, else to the node placement chooses,
//     where it wakes from its persisted snapshot. The drained node's
//     fencing then removes its local copy.
//
// A sandbox whose files cannot leave the node (persist none, no shared
// blob store, a last sleep whose persist failed) is neither slept nor
// moved: it stays, is still served, and counts in the node's drain
// progress (api.Node.Running, Sleeping) until it is destroyed.

// drainBatch is how many running sandboxes a draining node sleeps at
// once, per heartbeat: each sleep uploads the sandbox's writable layer.
const drainBatch = 2

// moveOff is forward.Mover: rec is sleeping and its owner is draining.
func (w *clusterWiring) moveOff(ctx context.Context, rec store.Sandbox) (string, error) {
	if why := w.pinned(ctx, rec); why != "" {
		w.logOnce(rec, "drain: sandbox %s stays on draining node %s: %s", rec.Name, rec.Owner, why)
		return "", nil
	}
	to := ""
	if w.isNode && rec.Owner != w.self {
		if me, err := w.st.GetNode(ctx, w.self); err == nil && !me.Draining {
			to = w.self
		}
	}
	if to == "" {
		if w.placer == nil {
			return "", nil
		}
		node, err := w.placer.Place(policy.WithTenant(ctx, rec.Tenant), moveRequest(rec))
		if err != nil {
			// Placement's own kinds (unavailable, resource exhausted):
			// never failed-precondition, which would make the caller
			// read the record again.
			return "", errdefs.Wrap(errdefs.ErrUnavailable, err, "place sandbox %q off draining node %q: %v", rec.Name, rec.Owner, err)
		}
		to = node
	}
	if to == "" || to == rec.Owner {
		return "", nil
	}
	moved, err := store.TakeoverSleeping(ctx, w.st, rec, rec.Owner, to)
	if err != nil {
		return "", err // failed precondition: it woke or moved meanwhile
	}
	detail := fmt.Sprintf("from draining node %s to %s, epoch %d, wakes from persisted snapshot %s", rec.Owner, to, moved.OwnerEpoch, rec.PersistSnapshot)
	_ = w.st.Append(ctx, store.JournalEntry{Sandbox: rec.Name, Op: "move", Detail: detail, At: time.Now()})
	w.logf("drain: sandbox %s moved %s", rec.Name, detail)
	return to, nil
}

// pinned says why rec's files cannot leave its node ("" when they can):
// moving it would wake it elsewhere without them.
func (w *clusterWiring) pinned(ctx context.Context, rec store.Sandbox) string {
	switch {
	case !w.sharedBlobs:
		return "this cluster has no shared blob store (--s3-endpoint), so its files cannot leave the node"
	case !persistsFiles(rec):
		return "it was created with persist " + orNone(rec.Persist) + ", so its files cannot leave the node"
	case rec.PersistSnapshot == "":
		return "it has no persisted snapshot yet"
	}
	j, err := w.st.Journal(ctx, rec.Name)
	if err != nil {
		return "its journal cannot be read (" + err.Error() + ") to tell whether its last sleep persisted"
	}
	if !lastSleepPersisted(j) {
		return "its last sleep did not persist to the blob store (persist-failed in its journal)"
	}
	return ""
}

// lastSleepPersisted reports whether the last sleep in a sandbox's journal
// was not preceded by a failed persist (the node journals persist-failed
// just before the sleep it belongs to). A journal without a sleep (pruned)
// counts as persisted.
func lastSleepPersisted(j []store.JournalEntry) bool {
	ok, failed := true, false
	for _, e := range j {
		switch e.Op {
		case "persist-failed":
			failed = true
		case "sleep":
			ok, failed = !failed, false
		}
	}
	return ok
}

// persistsFiles reports whether rec's sleeps copy its files to the blob
// store (persist disk, or interval, which adds checkpoints while it runs).
func persistsFiles(rec store.Sandbox) bool {
	return rec.Persist == api.PersistDisk || rec.Persist == api.PersistInterval
}

func orNone(s string) string {
	if s == "" {
		return api.PersistNone
	}
	return s
}

// moveRequest is what placement needs of a sandbox that moves: its size,
// isolation and image, and its persisted snapshot, whose layers count for
// locality.
func moveRequest(rec store.Sandbox) api.CreateSandboxRequest {
	req := api.CreateSandboxRequest{Name: rec.Name, Image: rec.Image, Instance: rec.Instance, Isolation: rec.Isolation, Snapshot: rec.PersistSnapshot}
	if rec.Instance == "custom" || rec.Instance == "" {
		r := rec.Resources
		req.Instance, req.Resources = "", &r
		if r == (api.Resources{}) {
			req.Resources = nil
		}
	}
	return req
}

// logOnce logs a sandbox's message once per version of its record, so a
// sandbox that keeps getting requests does not flood the log.
func (w *clusterWiring) logOnce(rec store.Sandbox, format string, args ...any) {
	w.mu.Lock()
	if w.logged == nil {
		w.logged = map[string]int64{}
	}
	seen := w.logged[rec.Name] == rec.Version
	w.logged[rec.Name] = rec.Version
	w.mu.Unlock()
	if !seen {
		w.logf(format, args...)
	}
}

// drainingWake is local.Config.MayWake in cluster mode: while this node
// drains, a sleeping sandbox is not woken here for a forwarded request
// that its entry node can send again (forward.RefuseMoving): the entry
// moves it off this node instead. This is the request that was proxied
// while the sandbox still ran and reached it after the drain slept it;
// under steady traffic, waking it here would never let it go. Every other
// wake (a request made here, one the entry cannot resend, a sandbox that
// cannot move, which the entry then sends without the mark) goes ahead.
func drainingWake(st interface {
	GetNode(ctx context.Context, name string) (store.Node, error)
}, self string) func(ctx context.Context, rec store.Sandbox) error {
	return func(ctx context.Context, rec store.Sandbox) error {
		if _, ok := forward.From(ctx); !ok {
			return nil
		}
		n, err := st.GetNode(ctx, self)
		if err != nil || !n.Draining {
			return nil
		}
		if !forward.RefuseMoving(ctx) {
			return nil
		}
		return errdefs.Unavailable("sandbox %q is moving off draining node %q: the node the request entered at sends it to the new owner", rec.Name, self)
	}
}

// drainStore is what the drain loop reads.
type drainStore interface {
	GetNode(ctx context.Context, name string) (store.Node, error)
	List(ctx context.Context) ([]store.Sandbox, error)
}

// drainer is a draining node's own part: while its entry is Draining it
// sleeps its running sandboxes, drainBatch at a time, each turn.
type drainer struct {
	self   string
	st     drainStore
	sleep  func(ctx context.Context, name string) error // the normal sleep (control.Plane.Sleep)
	shared bool                                         // the blob store is shared: sleeps persist off the node
	batch  int
	logf   func(string, ...any)

	on      bool            // draining as of the last turn
	last    [2]int          // running, sleeping as last logged
	skipped map[string]bool // running sandboxes logged as staying
}

// drainLoop runs the drainer every interval until ctx ends.
func (w *clusterWiring) drainLoop(ctx context.Context, sleep func(ctx context.Context, name string) error, every time.Duration) {
	d := &drainer{self: w.self, st: w.st, sleep: sleep, shared: w.sharedBlobs, batch: drainBatch, logf: w.logf}
	everyTick(ctx, every, func() { d.turn(ctx) })
}

// turn is one round: it returns the names it put to sleep.
func (d *drainer) turn(ctx context.Context) []string {
	n, err := d.st.GetNode(ctx, d.self)
	if err != nil {
		return nil // no entry yet, or the store is away: the next turn
	}
	if !n.Draining {
		if d.on {
			d.logf("drain: node %s is undrained: it keeps its sandboxes and takes new ones", d.self)
		}
		d.on, d.last, d.skipped = false, [2]int{-1, -1}, nil
		return nil
	}
	if !d.on {
		d.on, d.last, d.skipped = true, [2]int{-1, -1}, map[string]bool{}
		if d.shared {
			d.logf("drain: node %s is draining: it sleeps its running sandboxes, %d at a time, and each moves to another node on its next request", d.self, d.batch)
		} else {
			d.logf("drain: node %s is draining, but the cluster has no shared blob store (--s3-endpoint): its sandboxes cannot move, so it only stops taking new ones", d.self)
		}
	}
	if !d.shared {
		return nil
	}
	recs, err := d.st.List(ctx)
	if err != nil {
		d.logf("drain: list the sandboxes of node %s: %v", d.self, err)
		return nil
	}
	var todo []string
	running, sleeping := 0, 0
	for _, r := range recs {
		if r.Owner != d.self {
			continue
		}
		switch r.State {
		case api.StateSleeping:
			sleeping++
		case api.StateRunning, api.StateStarting:
			running++
			switch {
			case !persistsFiles(r):
				if !d.skipped[r.Name] {
					d.skipped[r.Name] = true
					d.logf("drain: sandbox %s stays running on node %s: it was created with persist %s, so its files cannot leave the node", r.Name, d.self, orNone(r.Persist))
				}
			case r.State == api.StateRunning && len(todo) < d.batch:
				todo = append(todo, r.Name)
			}
		}
	}
	if c := [2]int{running, sleeping}; c != d.last {
		d.last = c
		d.logf("drain: node %s still owns %d running and %d sleeping sandboxes; putting %d to sleep now", d.self, running, sleeping, len(todo))
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		slept []string
	)
	for _, name := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := d.sleep(ctx, name); err != nil {
				d.logf("drain: sleep sandbox %s: %v (retried next turn)", name, err)
				return
			}
			d.logf("drain: sandbox %s slept in %s: it moves to another node on its next request", name, time.Since(t0).Round(time.Millisecond))
			mu.Lock()
			slept = append(slept, name)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return slept
}

package daemon

import (
	"context"
	"time"

	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// A durable object (any class but the sandbox's, which lives where its
// sandbox is owned) lives in a cluster where its lease "object/CLASS/ID"
// is held: objectHolder takes it for --node-stale on every call and alarm
// tick here. An instance can stay in memory far longer than that (until
// durable.Config.EvictAfter without calls), so without more another member
// could take the lapsed lease and serve the object while this member
// still keeps its old memory, and two members would act on one object
// with diverging state. Two rules prevent it:
//
//   - renewal: while the instance is resident here, leaseLoop renews its
//     lease (store.RenewLease, conditional on holder and epoch) every
//     leaseRenewEvery, so an object in memory does not move while this
//     member is alive and reaches the store;
//   - eviction at the lapse: when the renewal is refused (another member
//     holds the lease now) or cannot be made before the lease lapses (the
//     store is away), the instance is evicted here at once, so it is gone
//     from memory by the time another member may take the lease; the next
//     call rebuilds it from Storage wherever the lease is then.
//
// A lease whose instance left memory (idle eviction) is no longer renewed
// and lapses --node-stale later; the object may then move.

// heldLease is an object lease this member holds, as last taken or renewed.
type heldLease struct {
	addr  durable.Address
	lease store.Lease
	// until is when the lease lapses at the earliest, in this process's
	// clock: the time the taking or renewing request was sent plus the
	// TTL (the store's expiry is later than that).
	until time.Time
}

// leaseRenewEvery is how often held object leases are renewed: a quarter
// of the TTL, so that a renewal can fail three times before the lease
// lapses.
func leaseRenewEvery(stale time.Duration) time.Duration { return max(stale/4, time.Millisecond) }

// hold records l (taken or renewed by a request sent at sent) as held.
func (w *clusterWiring) hold(addr durable.Address, l store.Lease, sent time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held == nil {
		w.held = map[string]heldLease{}
	}
	w.held[l.Key] = heldLease{addr: addr, lease: l, until: sent.Add(w.stale)}
}

// drop forgets h when it is still the lease held (a newer take of the
// same key, made meanwhile, stays).
func (w *clusterWiring) drop(h heldLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.held[h.lease.Key]; ok && cur.lease.Epoch == h.lease.Epoch && cur.until.Equal(h.until) {
		delete(w.held, h.lease.Key)
	}
}

// leaseLoop runs renewLeases every interval until ctx ends.
func (w *clusterWiring) leaseLoop(ctx context.Context, every time.Duration) {
	everyTick(ctx, every, func() { w.renewLeases(ctx) })
}

// renewLeases renews every held object lease whose instance is resident
// here, evicts the instance of one that another member took or that could
// not be renewed before it lapsed, and forgets the leases of instances
// that left memory. It returns the addresses it evicted.
func (w *clusterWiring) renewLeases(ctx context.Context) []durable.Address {
	w.mu.Lock()
	held := make([]heldLease, 0, len(w.held))
	for _, h := range w.held {
		held = append(held, h)
	}
	w.mu.Unlock()
	var evicted []durable.Address
	for _, h := range held {
		if w.resident == nil || !w.resident(h.addr) {
			w.drop(h) // nothing in memory to diverge: let it lapse
			continue
		}
		sent := time.Now()
		var err error
		var l store.Lease
		if sent.Before(h.until) {
			// A renewal that cannot finish before the lapse is no use.
			rctx, cancel := context.WithDeadline(ctx, h.until)
			l, err = w.st.RenewLease(rctx, h.lease, w.stale)
			cancel()
		} else {
			err = errdefs.Unavailable("the lease lapsed before it could be renewed")
		}
		switch {
		case err == nil:
			w.hold(h.addr, l, sent)
			continue
		case errdefs.IsKind(err, errdefs.ErrFailedPrecondition):
			w.logf("object %s/%s: its lease (epoch %d) is another member's now: its instance here is dropped", h.addr.Class, h.addr.ID, h.lease.Epoch)
		case time.Now().Before(h.until):
			continue // retried next turn, while the lease still holds
		default:
			w.logf("object %s/%s: its lease (epoch %d) lapsed unrenewed (%v): its instance here is dropped, so no other member's can diverge from it", h.addr.Class, h.addr.ID, h.lease.Epoch, err)
		}
		w.drop(h)
		if w.evict != nil {
			w.evict(h.addr)
		}
		evicted = append(evicted, h.addr)
	}
	return evicted
}

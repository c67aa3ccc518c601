package store

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Takeover makes node the owner of the sandbox name, for when its owner is
// dead (the caller decides that; Takeover only records it). The record is
// rewritten conditionally on the Version it read, so two nodes taking over
// at once cannot both win, and the old owner's next write fails its
// optimistic check. OwnerEpoch grows by one. What belonged to the old
// owner's host is cleared: the sandbox is sleeping (its compute died with
// the node), with no address and no user-namespace range, and its next
// start wakes it from its last persisted snapshot (Persist). It returns
// the new record; taking over a sandbox the node already owns returns it
// unchanged. A live owner's sandbox moves with TakeoverSleeping instead.
func Takeover(ctx context.Context, s Store, name, node string) (Sandbox, error) {
	if node == "" {
		return Sandbox{}, errdefs.InvalidArgument("takeover of %q: no node named", name)
	}
	rec, err := s.Get(ctx, name)
	if err != nil {
		return Sandbox{}, err
	}
	if rec.Owner == node {
		return rec, nil
	}
	return handOver(ctx, s, rec, node)
}

// TakeoverFrom is Takeover conditional on the record as the caller read
// it: the write succeeds only when read is still the stored version and
// still names from (the dead owner) as its owner. A caller that chose node
// by reading read (placement) thus never moves a sandbox that another
// member took over meanwhile, to a node that is alive and may already be
// waking it; it gets an errdefs failed-precondition error and reads the
// record again.
func TakeoverFrom(ctx context.Context, s Store, read Sandbox, from, node string) (Sandbox, error) {
	switch {
	case node == "" || from == "":
		return Sandbox{}, errdefs.InvalidArgument("takeover of %q: both the node it leaves and the node it moves to must be named", read.Name)
	case node == from:
		return Sandbox{}, errdefs.InvalidArgument("takeover of %q: it already is on node %q", read.Name, node)
	case read.Version == 0:
		return Sandbox{}, errdefs.InvalidArgument("takeover of %q: the record was not read from the store (version 0)", read.Name)
	case read.Owner != from:
		return Sandbox{}, errdefs.FailedPrecondition("takeover of %q off node %q: it is owned by %q now", read.Name, from, read.Owner)
	}
	return handOver(ctx, s, read, node)
}

// TakeoverSleeping moves a sleeping sandbox off a live owner that is
// draining (berth node drain) to node. read is the record as the caller
// read it: the write is conditional on read.Version, and it is refused
// (errdefs failed-precondition) unless read was sleeping and owned by
// from, so a sandbox that woke on its owner, or that another member moved
// first, since the caller read it stays where it is. The new record (the
// next OwnerEpoch, no address, no user-namespace range) is returned; its
// next start wakes it on node from its last persisted snapshot. The old
// owner keeps running nothing of it: the sandbox was asleep, and its
// fencing removes the local writable layer once it sees the new owner.
func TakeoverSleeping(ctx context.Context, s Store, read Sandbox, from, node string) (Sandbox, error) {
	switch {
	case node == "" || from == "":
		return Sandbox{}, errdefs.InvalidArgument("move of sandbox %q: both the node it leaves and the node it moves to must be named", read.Name)
	case node == from:
		return Sandbox{}, errdefs.InvalidArgument("move of sandbox %q: it already is on node %q", read.Name, node)
	case read.Version == 0:
		return Sandbox{}, errdefs.InvalidArgument("move of sandbox %q: the record was not read from the store (version 0)", read.Name)
	case read.Owner != from:
		return Sandbox{}, errdefs.FailedPrecondition("move of sandbox %q off node %q: it is owned by %q now", read.Name, from, read.Owner)
	case read.State != api.StateSleeping:
		return Sandbox{}, errdefs.FailedPrecondition("move of sandbox %q off node %q: it is %s, not sleeping", read.Name, from, read.State)
	}
	return handOver(ctx, s, read, node)
}

// handOver writes rec, as read, with node as its owner (see Takeover).
func handOver(ctx context.Context, s Store, rec Sandbox, node string) (Sandbox, error) {
	from := rec.Owner
	rec.Owner, rec.OwnerEpoch = node, rec.OwnerEpoch+1
	if rec.State == api.StateRunning || rec.State == api.StateStarting {
		rec.State = api.StateSleeping
	}
	rec.StartedAt, rec.IP, rec.HostUID = time.Time{}, "", 0
	rec.SleepAt = time.Time{}
	v, err := s.Put(ctx, rec)
	if err != nil {
		return Sandbox{}, fmt.Errorf("takeover of %q from %q: %w", rec.Name, from, err)
	}
	rec.Version = v
	return rec, nil
}

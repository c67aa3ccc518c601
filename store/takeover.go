package store

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Takeover makes node the owner of the sandbox name, for when its owner is
// dead or drained (the caller decides that; Takeover only records it). The
// record is rewritten conditionally on the Version it read, so two nodes
// taking over at once cannot both win, and the old owner's next write
// fails its optimistic check. OwnerEpoch grows by one. What belonged to
// the old owner's host is cleared: the sandbox is sleeping (its compute
// died with the node), with no address and no user-namespace range, and
// its next start wakes it from its last persisted snapshot (Persist). It
// returns the new record; taking over a sandbox the node already owns
// returns it unchanged.
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
	from := rec.Owner
	rec.Owner, rec.OwnerEpoch = node, rec.OwnerEpoch+1
	if rec.State == api.StateRunning || rec.State == api.StateStarting {
		rec.State = api.StateSleeping
	}
	rec.StartedAt, rec.IP, rec.HostUID = time.Time{}, "", 0
	rec.SleepAt = time.Time{}
	v, err := s.Put(ctx, rec)
	if err != nil {
		return Sandbox{}, fmt.Errorf("takeover of %q from %q: %w", name, from, err)
	}
	rec.Version = v
	return rec, nil
}

package volume

import (
	"context"

	"github.com/berth-sh/berth/store"
)

// Syncer moves a volume's content between nodes: Push after its writer
// detaches (stop, sleep, destroy), Fetch before a sandbox mounts it. In
// cluster mode it will sync the subvolume to the S3 blob store and fetch
// it where it is next mounted, with the single-writer rule enforced by
// the cluster's owner and epoch records; that part is not built yet.
type Syncer interface {
	Push(ctx context.Context, v store.Volume) error
	Fetch(ctx context.Context, v store.Volume) error
}

// Local is the single-host Syncer: a volume's data stays on the node that
// made it, so there is nothing to move.
type Local struct{}

func (Local) Push(context.Context, store.Volume) error  { return nil }
func (Local) Fetch(context.Context, store.Volume) error { return nil }

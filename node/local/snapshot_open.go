package local

import (
	"context"
	"io"
)

// OpenSnapshotLayer opens the layer blob (tar+zstd) of snapshot id as it
// is stored, for the image builder, which turns a RUN step's snapshot into
// an image layer (package imagebuild).
func (m *Manager) OpenSnapshotLayer(ctx context.Context, id string) (io.ReadCloser, error) {
	if err := m.snapshotsReady(); err != nil {
		return nil, err
	}
	if _, err := m.GetSnapshot(ctx, id); err != nil { // tenant-checked
		return nil, err
	}
	rc, _, err := m.cfg.Blobs.Get(ctx, snapKey(id))
	return rc, err
}

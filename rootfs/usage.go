package rootfs

import (
	"fmt"
	"path/filepath"

	"github.com/berth-sh/berth/internal/btrfs"
)

// DiskUsage is the bytes id's writable layer holds, as its btrfs quota
// group accounts them (the number its disk quota limits).
func (m *Manager) DiskUsage(id string) (int64, error) {
	if err := validID(id); err != nil {
		return 0, err
	}
	n, err := btrfs.Referenced(filepath.Join(m.uppers, id))
	if err != nil {
		return 0, fmt.Errorf("disk usage of %s: %w", id, err)
	}
	return n, nil
}

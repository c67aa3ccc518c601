package rootfs

import (
	"os"

	"github.com/berth-sh/berth/internal/btrfs"
)

// The btrfs operations live in internal/btrfs (shared with package volume).
var (
	enableQuota   = btrfs.EnableQuota
	createSubvol  = btrfs.CreateSubvol
	destroySubvol = btrfs.DestroySubvol
	subvolID      = btrfs.SubvolID
	setLimit      = btrfs.SetLimit
	removeQgroup  = btrfs.RemoveQgroup
	isBtrfs       = btrfs.IsBtrfs
)

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

var (
	snapshotSubvol  = btrfs.SnapshotSubvol
	destroySubvolV2 = btrfs.DestroySubvolV2
	setReadOnly     = btrfs.SetReadOnly
)

var (
	attachAndMount = btrfs.AttachAndMount
	mkfs           = btrfs.Mkfs
)

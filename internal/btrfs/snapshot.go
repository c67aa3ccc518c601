package btrfs

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Snapshots: a btrfs snapshot of a subvolume shares every extent with its
// source (copy-on-write), so it costs one transaction commit whatever the
// subvolume holds.
const (
	// _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2) and
	// _IOW(0x94, 63, ...): the v2 argument struct is exactly 4096 bytes.
	iocSnapCreateV2  = 0x50009417
	iocSnapDestroyV2 = 0x5000943F

	subvolRdonly = 1 << 1 // BTRFS_SUBVOL_RDONLY
)

// volArgsV2 is struct btrfs_ioctl_vol_args_v2: fd, transid, flags, a
// 32-byte union (size + qgroup_inherit pointer) and a 4040-byte name
// (BTRFS_SUBVOL_NAME_MAX + 1).
type volArgsV2 struct {
	Fd      int64
	Transid uint64
	Flags   uint64
	Unused  [4]uint64
	Name    [4040]byte
}

var _ [4096 - unsafe.Sizeof(volArgsV2{})]struct{} // the kernel ABI size, checked at compile time

// SnapshotSubvol snapshots the subvolume src as parent/name.
func SnapshotSubvol(src, parent, name string, readOnly bool) error {
	if len(name) >= len(volArgsV2{}.Name) {
		return errdefs.InvalidArgument("snapshot name %q is too long", name)
	}
	sfd, err := OpenDir(src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	pfd, err := OpenDir(parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	a := volArgsV2{Fd: int64(sfd)}
	if readOnly {
		a.Flags = subvolRdonly
	}
	copy(a.Name[:len(a.Name)-1], name)
	if err := ioctl(pfd, iocSnapCreateV2, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("create btrfs snapshot %s/%s: %w", parent, name, err)
	}
	return nil
}

// DestroySubvolV2 deletes subvolume name in parent with the v2 ioctl
// (by name), which also accepts read-only subvolumes.
func DestroySubvolV2(parent, name string) error {
	fd, err := OpenDir(parent)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var a volArgsV2
	copy(a.Name[:len(a.Name)-1], name)
	if err := ioctl(fd, iocSnapDestroyV2, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("delete btrfs snapshot %s/%s: %w", parent, name, err)
	}
	return nil
}

// _IOR(0x94, 25, __u64) and _IOW(0x94, 26, __u64).
const (
	iocSubvolGetflags = 0x80089419
	iocSubvolSetflags = 0x4008941a
)

// SetReadOnly sets or clears a subvolume's read-only flag.
func SetReadOnly(sub string, ro bool) error {
	fd, err := OpenDir(sub)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var flags uint64
	if err := ioctl(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("get flags of %s: %w", sub, err)
	}
	if ro {
		flags |= subvolRdonly
	} else {
		flags &^= subvolRdonly
	}
	if err := ioctl(fd, iocSubvolSetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("set flags of %s: %w", sub, err)
	}
	return nil
}

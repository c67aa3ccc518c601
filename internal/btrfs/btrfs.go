package btrfs

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// btrfs ioctl numbers and argument layouts, from linux/btrfs.h (the UAPI is
// stable). Computed with the _IOW/_IOR/_IOWR encoding for magic 0x94.
const (
	iocSubvolCreate = 0x5000940E // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	iocSnapDestroy  = 0x5000940F // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	iocInoLookup    = 0xD0009412 // _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
	iocQuotaCtl     = 0xC0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	iocQgroupCreate = 0x4010942A // _IOW(0x94, 42, struct btrfs_ioctl_qgroup_create_args)
	iocQgroupLimit  = 0x8030942B // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)

	quotaCtlEnable       = 1
	quotaCtlEnableSimple = 4 // kernel >= 6.7

	qgroupLimitMaxRfer = 1 << 0
	qgroupLimitMaxExcl = 1 << 1

	firstFreeObjectID = 256
	btrfsSuperMagic   = 0x9123683E
)

type volArgs struct {
	Fd   int64
	Name [4088]byte
}

type inoLookupArgs struct {
	TreeID   uint64
	ObjectID uint64
	Name     [4080]byte
}

type quotaCtlArgs struct {
	Cmd    uint64
	Status uint64
}

type qgroupCreateArgs struct {
	Create   uint64
	QgroupID uint64
}

type qgroupLimitArgs struct {
	QgroupID uint64
	Flags    uint64
	MaxRfer  uint64
	MaxExcl  uint64
	RsvRfer  uint64
	RsvExcl  uint64
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

func OpenDir(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
}

// EnableQuota turns quota groups on for the filesystem mounted at mnt,
// preferring simple quotas. Enabling an already-enabled mode is a no-op.
func EnableQuota(mnt string) (simple bool, err error) {
	fd, err := OpenDir(mnt)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	a := quotaCtlArgs{Cmd: quotaCtlEnableSimple}
	if err := ioctl(fd, iocQuotaCtl, unsafe.Pointer(&a)); err == nil {
		return true, nil
	} else if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EEXIST) {
		return false, fmt.Errorf("enable btrfs simple quota on %s: %w", mnt, err)
	}
	a = quotaCtlArgs{Cmd: quotaCtlEnable}
	if err := ioctl(fd, iocQuotaCtl, unsafe.Pointer(&a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return false, fmt.Errorf("enable btrfs quota on %s: %w", mnt, err)
	}
	return false, nil
}

// CreateSubvol creates subvolume name inside the directory parent.
func CreateSubvol(parent, name string) error {
	fd, err := OpenDir(parent)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var a volArgs
	copy(a.Name[:len(a.Name)-1], name)
	if err := ioctl(fd, iocSubvolCreate, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("create btrfs subvolume %s/%s: %w", parent, name, err)
	}
	return nil
}

// DestroySubvol deletes subvolume name (and all its contents) from parent.
// The kernel frees the extents in the background; the quota group's usage
// drops as it does.
func DestroySubvol(parent, name string) error {
	fd, err := OpenDir(parent)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var a volArgs
	copy(a.Name[:len(a.Name)-1], name)
	if err := ioctl(fd, iocSnapDestroy, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("delete btrfs subvolume %s/%s: %w", parent, name, err)
	}
	return nil
}

// SubvolID returns the id of the subvolume whose root is dir, or an error if
// dir is not a subvolume root (a plain directory would silently share its
// parent's quota group, which must never happen).
func SubvolID(dir string) (uint64, error) {
	fd, err := OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Ino != firstFreeObjectID {
		return 0, fmt.Errorf("%s is not a btrfs subvolume (inode %d)", dir, st.Ino)
	}
	a := inoLookupArgs{ObjectID: firstFreeObjectID}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&a)); err != nil {
		return 0, fmt.Errorf("look up btrfs subvolume id of %s: %w", dir, err)
	}
	return a.TreeID, nil
}

// SetLimit sets the hard byte limit of level-0 quota group 0/id. 0 removes it.
// Both referenced and exclusive are limited: they are equal for a sandbox
// upper (nothing is shared), and limiting both keeps the bound whichever
// accounting mode the filesystem is in.
func SetLimit(mnt string, id uint64, bytes int64) error {
	fd, err := OpenDir(mnt)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	a := qgroupLimitArgs{QgroupID: id, Flags: qgroupLimitMaxRfer | qgroupLimitMaxExcl}
	if bytes > 0 {
		a.MaxRfer, a.MaxExcl = uint64(bytes), uint64(bytes)
	} else {
		a.MaxRfer, a.MaxExcl = ^uint64(0), ^uint64(0) // "none"
	}
	if err := ioctl(fd, iocQgroupLimit, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("set btrfs quota limit of subvolume %d: %w", id, err)
	}
	return nil
}

// RemoveQgroup drops the quota group of a deleted subvolume. Best effort: a
// qgroup that still has usage (extents being freed) cannot be removed yet and
// is harmless (ids are never reused).
func RemoveQgroup(mnt string, id uint64) {
	fd, err := OpenDir(mnt)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	a := qgroupCreateArgs{Create: 0, QgroupID: id}
	_ = ioctl(fd, iocQgroupCreate, unsafe.Pointer(&a))
}

func IsBtrfs(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return uint32(st.Type) == btrfsSuperMagic
}

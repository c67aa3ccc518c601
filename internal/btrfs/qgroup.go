package btrfs

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reading a quota group's usage: a TREE_SEARCH of the quota tree for the
// group's info item (linux/btrfs_tree.h).
const (
	iocTreeSearch   = 0xD0009411 // _IOWR(0x94, 17, struct btrfs_ioctl_search_args)
	quotaTreeID     = 8          // BTRFS_QUOTA_TREE_OBJECTID
	qgroupInfoKey   = 242        // BTRFS_QGROUP_INFO_KEY
	searchHeaderLen = 32         // struct btrfs_ioctl_search_header
)

type searchKey struct {
	TreeID                   uint64
	MinObjectID, MaxObjectID uint64
	MinOffset, MaxOffset     uint64
	MinTransid, MaxTransid   uint64
	MinType, MaxType         uint32
	NrItems                  uint32
	_                        uint32
	_                        [4]uint64
}

type searchArgs struct {
	Key searchKey
	Buf [4096 - 104]byte
}

var _ [4096 - unsafe.Sizeof(searchArgs{})]struct{} // the kernel ABI size

// Usage returns the referenced and exclusive bytes of level-0 quota group
// 0/id on the filesystem mounted at mnt, as of the last transaction
// commit.
func Usage(mnt string, id uint64) (rfer, excl int64, err error) {
	fd, err := OpenDir(mnt)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	a := searchArgs{Key: searchKey{
		TreeID:    quotaTreeID,
		MinOffset: id, MaxOffset: id,
		MaxTransid: ^uint64(0),
		MinType:    qgroupInfoKey, MaxType: qgroupInfoKey,
		NrItems: 1,
	}}
	if err := ioctl(fd, iocTreeSearch, unsafe.Pointer(&a)); err != nil {
		return 0, 0, fmt.Errorf("read btrfs quota group %d: %w", id, err)
	}
	if a.Key.NrItems == 0 {
		return 0, 0, fmt.Errorf("btrfs quota group 0/%d not found", id)
	}
	b := a.Buf[:]
	typ := binary.LittleEndian.Uint32(b[24:28])
	n := binary.LittleEndian.Uint32(b[28:32])
	if typ != qgroupInfoKey || n < 40 || searchHeaderLen+int(n) > len(b) {
		return 0, 0, fmt.Errorf("btrfs quota group 0/%d: unexpected item (type %d, %d bytes)", id, typ, n)
	}
	item := b[searchHeaderLen:]
	// struct btrfs_qgroup_info_item: generation, rfer, rfer_cmpr, excl, excl_cmpr.
	return int64(binary.LittleEndian.Uint64(item[8:16])), int64(binary.LittleEndian.Uint64(item[24:32])), nil
}

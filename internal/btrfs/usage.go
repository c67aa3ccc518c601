package btrfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iocFSInfo is BTRFS_IOC_FS_INFO: _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args).
const iocFSInfo = 0x8400941F

// fsInfoArgs is struct btrfs_ioctl_fs_info_args (1024 bytes); only the
// fsid is used.
type fsInfoArgs struct {
	MaxID      uint64
	NumDevices uint64
	FSID       [16]byte
	_          [1024 - 32]byte
}

// Referenced is the bytes the subvolume rooted at dir holds as its
// level-0 quota group accounts them (what SetLimit bounds), read from the
// kernel's sysfs view (/sys/fs/btrfs/<fsid>/qgroups/0_<id>/referenced):
// no tree is walked.
func Referenced(dir string) (int64, error) {
	qid, err := SubvolID(dir)
	if err != nil {
		return 0, err
	}
	fd, err := OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var a fsInfoArgs
	if err := ioctl(fd, iocFSInfo, unsafe.Pointer(&a)); err != nil {
		return 0, fmt.Errorf("btrfs fs info of %s: %w", dir, err)
	}
	u := a.FSID
	fsid := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	b, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", fsid, "qgroups", "0_"+strconv.FormatUint(qid, 10), "referenced"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// IDMap maps a sandbox's ids 0..Size-1 to host ids HostID..HostID+Size-1
// (the same range for uids and gids). The zero value means no mapping.
type IDMap struct {
	HostID uint32
	Size   uint32
}

// Enabled reports whether m maps anything.
func (m IDMap) Enabled() bool { return m.Size > 0 }

func (m IDMap) validate() error {
	if !m.Enabled() {
		return nil
	}
	if m.HostID == 0 || uint64(m.HostID)+uint64(m.Size) > 1<<32-1 {
		return errdefs.InvalidArgument("id map %d+%d is outside the host's unprivileged id space", m.HostID, m.Size)
	}
	return nil
}

// idmappedLayers gives each layer an idmapped, attached view under dir so
// that overlayfs, mounted over those views, shows on-disk id k as host id
// HostID+k. Files on disk keep the ids the sandbox sees (0 for its root),
// so image layers stay shared between sandboxes and a snapshot of the
// upper records in-sandbox ids. lowers are mounted read-only. It returns the
// views, lowest first, and the upper view (holding upper/ and work/).
func idmappedLayers(dir string, m IDMap, lowers []string, upperSub string) ([]string, string, error) {
	nsfd, err := userNSFd(m)
	if err != nil {
		return nil, "", err
	}
	defer unix.Close(nsfd)
	views := make([]string, len(lowers))
	for i, l := range lowers {
		views[i] = filepath.Join(dir, "l", strconv.Itoa(i))
		if err := idmapMount(l, views[i], nsfd, true); err != nil {
			return nil, "", err
		}
	}
	up := filepath.Join(dir, "u")
	if err := idmapMount(upperSub, up, nsfd, false); err != nil {
		return nil, "", err
	}
	return views, up, nil
}

// idmapMount attaches an idmapped clone of src at target (created if
// missing). An existing mount at target is replaced.
func idmapMount(src, target string, nsfd int, readonly bool) error {
	if err := os.MkdirAll(target, 0o700); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	for unix.Unmount(target, unix.MNT_DETACH) == nil {
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("rootfs: open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(nsfd)}
	if readonly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		// Fail closed: without the idmap the sandbox's root would own
		// nothing, or (worse) files would be written as host root.
		return errdefs.FailedPrecondition("rootfs: idmapped mount of %s: %w (this kernel or filesystem does not support idmapped mounts)", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("rootfs: attach idmapped %s at %s: %w", src, target, err)
	}
	return nil
}

// userNSFd returns an fd of a new user namespace with map m. A namespace
// only exists while something is in it or holds it, so a child is started
// in a new user namespace, stopped by ptrace before it executes anything,
// its namespace opened, and the child killed. The fd keeps the namespace.
func userNSFd(m IDMap) (int, error) {
	goruntime.LockOSThread() // the ptrace tracer is this thread
	defer goruntime.UnlockOSThread()
	maps := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.HostID), Size: int(m.Size)}}
	proc, err := os.StartProcess("/proc/self/exe", []string{"berth-userns"}, &os.ProcAttr{
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: maps, GidMappings: maps,
			Ptrace:    true, // stops at exec: nothing of the binary ever runs
			Pdeathsig: syscall.SIGKILL,
		},
	})
	if err != nil {
		return -1, errdefs.FailedPrecondition("rootfs: create a user namespace: %w", err)
	}
	defer func() {
		_ = proc.Kill()
		_, _ = proc.Wait()
	}()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("rootfs: open user namespace: %w", err)
	}
	return fd, nil
}

// unmountUnder unmounts every mount at or below dir, deepest and latest
// first. A busy mount is detached.
func unmountUnder(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil // nothing can be mounted below a path that is not there
	}
	ms, err := mounts()
	if err != nil {
		return err
	}
	var errs []error
	for i := len(ms) - 1; i >= 0; i-- {
		p := ms[i].Point
		if p != dir && !hasPathPrefix(p, dir) {
			continue
		}
		if err := unix.Unmount(p, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(p, unix.MNT_DETACH)
			}
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rootfs: unmount %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

func hasPathPrefix(p, dir string) bool {
	return len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}

// secbitNoSetuidFixup keeps a thread's capabilities when its fsuid leaves 0
// (SECBIT_NO_SETUID_FIXUP, linux/securebits.h).
const secbitNoSetuidFixup = 1 << 2

// mountAsMappedRoot mounts the overlay with the mounter's fsuid/fsgid set to
// the sandbox root's host id. overlayfs records its mounter's credentials and
// uses them for work-dir and copy-up operations; through the idmapped upper,
// host root has no mapping (EOVERFLOW, and the kernel mounts the overlay
// read-only), while the mapped root writes on-disk id 0.
func mountAsMappedRoot(m IDMap, target, data string) error {
	return AsMappedRoot(m.HostID, func() error { return unix.Mount("overlay", target, "overlay", 0, data) })
}

// AsMappedRoot runs fn with this thread's fsuid and fsgid set to hostID (a
// sandbox root's host id), keeping the capabilities
// (SECBIT_NO_SETUID_FIXUP). Host code that writes into a sandbox's rootfs
// must do so through it: the rootfs sits on idmapped layers where host
// root has no mapping (EOVERFLOW). fn must not start goroutines that do
// file system work. The thread is locked and never unlocked, so the Go
// runtime discards it afterwards.
func AsMappedRoot(hostID uint32, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbitNoSetuidFixup, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("rootfs: securebits: %w", err)
			return
		}
		if err := unix.Setfsgid(int(hostID)); err != nil {
			errc <- fmt.Errorf("rootfs: setfsgid: %w", err)
			return
		}
		if err := unix.Setfsuid(int(hostID)); err != nil {
			errc <- fmt.Errorf("rootfs: setfsuid: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// UserNSFd returns an fd of a new user namespace with map m (for an
// idmapped mount, MOUNT_ATTR_IDMAP). The caller closes it.
func UserNSFd(m IDMap) (int, error) {
	if err := m.validate(); err != nil {
		return -1, err
	}
	return userNSFd(m)
}

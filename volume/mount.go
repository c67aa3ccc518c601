package volume

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/store"
)

// Attach claims the volumes of ms for sandbox (its tenant must own them)
// and mounts each into the sandbox's root filesystem (rootfsDir, mounted
// on the host) at its path, all or none. A read-write mount makes sandbox
// the volume's one writer: a volume with another live writer is refused
// (failed precondition, naming it). A snapshot mounts read-only only.
// idmap is the sandbox's user namespace map: the volume is seen through an
// idmapped mount, so on-disk id k is id k in every sandbox that mounts it.
func (m *Manager) Attach(ctx context.Context, sandbox, owner, rootfsDir string, ms []api.VolumeMount, idmap rootfs.IDMap) (err error) {
	if len(ms) == 0 {
		return nil
	}
	if err := api.ValidateVolumeMounts(ms); err != nil {
		return err
	}
	var claimed []api.VolumeMount
	defer func() {
		if err != nil {
			_ = m.Detach(context.WithoutCancel(ctx), sandbox, rootfsDir, claimed)
		}
	}()
	for _, vm := range ms {
		v, err := m.claim(ctx, sandbox, owner, vm)
		if err != nil {
			return err
		}
		claimed = append(claimed, vm)
		if err := m.opts.Sync.Fetch(ctx, v); err != nil {
			return fmt.Errorf("volume %q: fetch: %w", vm.Name, err)
		}
	}
	nsfd := -1
	if idmap.Enabled() {
		if nsfd, err = rootfs.UserNSFd(idmap); err != nil {
			return err
		}
		defer unix.Close(nsfd)
	}
	for _, vm := range ms {
		if err := m.bind(rootfsDir, vm, nsfd, idmap); err != nil {
			return err
		}
	}
	return nil
}

// claim records sandbox as vm's writer or one of its readers.
func (m *Manager) claim(ctx context.Context, sandbox, owner string, vm api.VolumeMount) (store.Volume, error) {
	for attempt := 0; ; attempt++ {
		v, err := m.st.GetVolume(ctx, vm.Name)
		if errdefs.IsKind(err, errdefs.ErrNotFound) || (err == nil && v.Tenant != owner) {
			return v, errdefs.NotFound("volume %q not found", vm.Name)
		}
		if err != nil {
			return v, err
		}
		if v.Node != "" && m.opts.Node != "" && v.Node != m.opts.Node {
			return v, errdefs.FailedPrecondition("volume %q lives on node %s; volumes do not move between nodes yet", vm.Name, v.Node)
		}
		if vm.ReadOnly {
			if slices.Contains(v.Readers, sandbox) {
				return v, nil
			}
			v.Readers = append(v.Readers, sandbox)
		} else {
			if v.Snapshot {
				return v, errdefs.FailedPrecondition("volume %q is a read-only snapshot: mount it with readOnly", vm.Name)
			}
			if v.Writer == sandbox {
				return v, nil
			}
			if v.Writer != "" && m.live(ctx, v.Writer) {
				return v, errdefs.FailedPrecondition("volume %q is mounted read-write by sandbox %q: one writer at a time (mount it readOnly, or snapshot it)", vm.Name, v.Writer)
			}
			v.Writer = sandbox
		}
		ver, err := m.st.PutVolume(ctx, v)
		if err == nil {
			v.Version = ver
			return v, nil
		}
		if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || attempt >= 8 {
			return v, err
		}
		// Changed meanwhile (another claim or a release): read again.
	}
}

// Detach unmounts sandbox's volumes of ms from rootfsDir (if they are
// still mounted) and releases its claims, so another sandbox may write.
// It is idempotent: releasing what is not claimed, or unmounting what is
// not mounted, is not an error.
func (m *Manager) Detach(ctx context.Context, sandbox, rootfsDir string, ms []api.VolumeMount) error {
	var errs []error
	for _, vm := range ms {
		if err := m.unbind(rootfsDir, vm); err != nil {
			errs = append(errs, err)
		}
	}
	for _, vm := range ms {
		v, err := m.release(ctx, sandbox, vm.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !vm.ReadOnly {
			if err := m.opts.Sync.Push(ctx, v); err != nil {
				errs = append(errs, fmt.Errorf("volume %q: push: %w", vm.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) release(ctx context.Context, sandbox, name string) (store.Volume, error) {
	for attempt := 0; ; attempt++ {
		v, err := m.st.GetVolume(ctx, name)
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			return v, nil
		}
		if err != nil {
			return v, err
		}
		readers := slices.DeleteFunc(slices.Clone(v.Readers), func(r string) bool { return r == sandbox })
		if v.Writer != sandbox && len(readers) == len(v.Readers) {
			return v, nil
		}
		if v.Writer == sandbox {
			v.Writer = ""
		}
		v.Readers = readers
		ver, err := m.st.PutVolume(ctx, v)
		if err == nil {
			v.Version = ver
			return v, nil
		}
		if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || attempt >= 8 {
			return v, err
		}
	}
}

// Path resolution: every step is an openat2 relative to a directory fd,
// never a host path string, and refuses symlinks (RESOLVE_NO_SYMLINKS),
// ".." escapes (RESOLVE_BENEATH) and, while walking, other mounts
// (RESOLVE_NO_XDEV). The same rules as the files API: nothing in a volume
// or in the sandbox's root can steer a host operation outside them.
const resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

func openBeneath(dirfd int, name string, xdev bool) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveStrict}
	if !xdev {
		how.Resolve |= unix.RESOLVE_NO_XDEV
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
}

// bind mounts volume vm at vm.Path inside rootfsDir: the volume's
// subvolume is opened by fd beneath the volumes directory, cloned as a
// detached mount (open_tree), given its attributes (read-only, nosuid,
// nodev, the sandbox's id map) and attached by fd to the target directory
// (move_mount), which was itself resolved by fd inside the sandbox root.
func (m *Manager) bind(rootfsDir string, vm api.VolumeMount, nsfd int, idmap rootfs.IDMap) error {
	dirfd, err := unix.Open(m.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	defer unix.Close(dirfd)
	src, err := openBeneath(dirfd, vm.Name, false)
	if err != nil {
		return fmt.Errorf("volume %q: open its data: %w", vm.Name, err)
	}
	defer unix.Close(src)
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("volume %q: open_tree: %w", vm.Name, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if vm.ReadOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if nsfd >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(nsfd)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("volume %q: set mount attributes: %w", vm.Name, err)
	}
	var target int
	resolve := func() error {
		var err error
		target, err = mkdirBeneath(rootfsDir, vm.Path)
		return err
	}
	if idmap.Enabled() {
		// Host root has no mapping on the idmapped rootfs: a missing
		// mount point is made as the sandbox's root.
		err = rootfs.AsMappedRoot(idmap.HostID, resolve)
	} else {
		err = resolve()
	}
	if err != nil {
		return err
	}
	defer unix.Close(target)
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("volume %q: attach at %s: %w", vm.Name, vm.Path, err)
	}
	return nil
}

// mkdirBeneath resolves guest (an absolute path in the sandbox) inside
// root one component at a time, making missing directories, and returns
// an O_PATH fd of the final directory. A symlink anywhere on the way, a
// non-directory, or another mount is refused: the path must name a plain
// directory of the sandbox's own root.
func mkdirBeneath(root, guest string) (int, error) {
	if err := api.ValidateVolumePath(guest); err != nil {
		return -1, err
	}
	cur, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("volume: open sandbox root: %w", err)
	}
	for _, c := range strings.Split(guest[1:], "/") {
		fd, err := openBeneath(cur, c, false)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				fd, err = openBeneath(cur, c, false)
			}
		}
		unix.Close(cur)
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return -1, errdefs.InvalidArgument("volume mount path %s: %q is a symlink or not a directory in the sandbox's root", guest, c)
		case errors.Is(err, unix.EXDEV):
			return -1, errdefs.InvalidArgument("volume mount path %s: %q is another mount", guest, c)
		case err != nil:
			return -1, fmt.Errorf("volume mount path %s: %q: %w", guest, c, err)
		}
		cur = fd
	}
	return cur, nil
}

// unbind detaches the mount of vm at vm.Path in rootfsDir, if the path
// (resolved without symlinks) ends on the root of a mount of that very
// volume. A path the sandbox changed (renamed, replaced by a symlink) is
// left alone: the rootfs unmount that follows detaches everything under
// it anyway.
func (m *Manager) unbind(rootfsDir string, vm api.VolumeMount) error {
	if api.ValidateVolumePath(vm.Path) != nil || api.ValidateVolumeName(vm.Name) != nil {
		return nil
	}
	root, err := unix.Open(rootfsDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, vm.Path[1:], true)
	if err != nil {
		return nil // not there (any more): nothing of ours to unmount
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_INO, &st); err != nil {
		return nil
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || st.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return nil
	}
	var vs unix.Stat_t
	if err := unix.Stat(filepath.Join(m.dir, vm.Name), &vs); err != nil || vs.Ino != st.Ino || unix.Mkdev(st.Dev_major, st.Dev_minor) != vs.Dev {
		return nil // a mount, but not this volume's
	}
	// The fd's magic link names exactly the mount it was opened on.
	if err := unix.Unmount("/proc/self/fd/"+strconv.Itoa(fd), unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("volume %q: unmount from %s: %w", vm.Name, vm.Path, err)
	}
	return nil
}

package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// DefaultUpperSize is the apparent size of the sparse uppers image. It only
// bounds the sum of what all sandboxes can write; host space is used as data
// is written.
const DefaultUpperSize int64 = 64 << 30

// maxMountData is the limit of mount(2)'s data argument (one page, with NUL).
const maxMountData = 4095

// Options configures Open.
type Options struct {
	// UpperSize is the size of the sparse uppers image created on first
	// Open (default 64 GiB). It is not changed for an existing image.
	UpperSize int64
	// MountDir holds the rootfs mount points (<MountDir>/<id>/rootfs);
	// default <dataDir>/sandboxes. A sandbox in a user namespace must be
	// able to reach its own mount point as its mapped root, so MountDir and
	// its ancestors need search permission for others (0711); each <id> dir
	// is then 0710 with the sandbox's group, so only that sandbox (and host
	// root) gets past it.
	MountDir string
}

// Manager owns the rootfs mounts and writable layers under one data dir.
// It is safe for concurrent use; operations on the same id are serialized.
type Manager struct {
	dataDir, uppers, sandboxes string
	mountDir                   string
	lockFile                   *os.File

	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// Open prepares dataDir: it creates and formats the uppers image the first
// time, and loop-mounts it if it is not mounted (after a reboot or a daemon
// restart in a new mount namespace). Only one Manager may own a dataDir at a
// time (an exclusive flock on dataDir/rootfs.lock).
func Open(ctx context.Context, dataDir string, opts Options) (*Manager, error) {
	if opts.UpperSize == 0 {
		opts.UpperSize = DefaultUpperSize
	}
	if opts.UpperSize < 256<<20 {
		return nil, errdefs.InvalidArgument("uppers image size %d is below the 256 MiB btrfs needs", opts.UpperSize)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		dataDir:   abs,
		uppers:    filepath.Join(abs, "uppers"),
		sandboxes: filepath.Join(abs, "sandboxes"),
		locks:     map[string]*idLock{},
		mountDir:  opts.MountDir,
	}
	if m.mountDir == "" {
		m.mountDir = m.sandboxes
	} else {
		if m.mountDir, err = filepath.Abs(m.mountDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(m.mountDir, 0o711); err != nil {
			return nil, fmt.Errorf("rootfs: %w", err)
		}
		if err := os.Chmod(m.mountDir, 0o711); err != nil {
			return nil, fmt.Errorf("rootfs: %w", err)
		}
	}
	for _, d := range []string{m.dataDir, m.uppers, m.sandboxes} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("rootfs: %w", err)
		}
	}
	lf, err := os.OpenFile(filepath.Join(abs, "rootfs.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lf.Close()
		return nil, errdefs.FailedPrecondition("rootfs data dir %s is in use by another process", abs)
	}
	m.lockFile = lf
	if err := m.ensureUppers(ctx, opts.UpperSize); err != nil {
		lf.Close()
		return nil, err
	}
	return m, nil
}

func (m *Manager) ensureUppers(ctx context.Context, size int64) error {
	mounted, err := m.isMountPoint(m.uppers, "btrfs")
	if err != nil {
		return err
	}
	if !mounted {
		img := filepath.Join(m.dataDir, "uppers.img")
		if !exists(img) {
			// Format under a temporary name so a crash never leaves a
			// half-made image that a later Open would try to mount.
			tmp := img + ".tmp"
			f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			err = f.Truncate(size)
			f.Close()
			if err == nil {
				err = mkfs(ctx, tmp)
			}
			if err == nil {
				err = os.Rename(tmp, img)
			}
			if err != nil {
				os.Remove(tmp)
				return fmt.Errorf("rootfs: create uppers image: %w", err)
			}
		}
		// discard=async gives freed blocks back to the host (the loop
		// driver punches holes in the sparse file) without slowing unlink.
		if err := attachAndMount(img, m.uppers, "discard=async"); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	if !isBtrfs(m.uppers) {
		return errdefs.FailedPrecondition("rootfs: %s is not a btrfs mount", m.uppers)
	}
	if _, err := enableQuota(m.uppers); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	return nil
}

// Close releases the data-dir lock. Mounts stay (running sandboxes keep
// their rootfs across a daemon restart).
func (m *Manager) Close() error {
	if m.lockFile == nil {
		return nil
	}
	err := m.lockFile.Close()
	m.lockFile = nil
	return err
}

// Shutdown unmounts every sandbox rootfs and the uppers filesystem, keeping
// all data. For tests and uninstall; the daemon does not call it.
func (m *Manager) Shutdown(ctx context.Context) error {
	ids, err := m.Mounted(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, m.Unmount(ctx, id))
	}
	if ok, _ := m.isMountPoint(m.uppers, "btrfs"); ok {
		// Mounts backed by files on the uppers filesystem (the snapshot
		// cache's layer images) hold it busy; the sandboxes that used
		// them are unmounted above.
		if ms, err := mounts(); err == nil {
			for i := len(ms) - 1; i >= 0; i-- {
				if hasPathPrefix(ms[i].Point, m.uppers) {
					_ = unix.Unmount(ms[i].Point, unix.MNT_DETACH)
				}
			}
		}
		if err := unmountBusyWait(m.uppers, 2*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.uppers, err))
		}
	}
	return errors.Join(errs...)
}

// unmountBusyWait unmounts target, retrying while it is busy for up to
// wait: a mount detached with MNT_DETACH (a layer image on the uppers
// filesystem) lets go of its backing file only when its last user is
// gone, and the kernel finishes that release asynchronously, so the
// filesystem under it can stay busy for a moment after the sandboxes that
// used it were unmounted.
func unmountBusyWait(target string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := unix.Unmount(target, 0)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RootfsPath is where Mount mounts the sandbox's rootfs.
func (m *Manager) RootfsPath(id string) string {
	return filepath.Join(m.mountDir, id, "rootfs")
}

// UpperDir is the sandbox's writable layer (for snapshots). Read it only
// while the rootfs is unmounted or the sandbox is frozen.
func (m *Manager) UpperDir(id string) string {
	return filepath.Join(m.uppers, id, "upper")
}

func (m *Manager) workDir(id string) string { return filepath.Join(m.uppers, id, "work") }

// Mount mounts the overlay for id with lowers given lowest first, creating the
// writable layer if missing (an existing one is kept: that is how a sleeping
// sandbox wakes with its files) and setting its disk limit to diskBytes
// (0 = no limit beyond the image). Mounting an already-mounted id with the
// same lowers only updates the limit.
//
// With idmap enabled, every layer is first given an idmapped view (see
// idmappedLayers) and the overlay is built from the views, so the sandbox's
// user namespace sees its own ids while the files on disk keep them.
func (m *Manager) Mount(ctx context.Context, id string, lowers []string, diskBytes int64, idmap IDMap) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	if err := idmap.validate(); err != nil {
		return "", err
	}
	if diskBytes < 0 {
		return "", errdefs.InvalidArgument("disk limit %d is negative", diskBytes)
	}
	if len(lowers) == 0 {
		return "", errdefs.InvalidArgument("sandbox %s: at least one lower layer is needed", id)
	}
	lowerOpt, err := lowerdirOption(lowers)
	if err != nil {
		return "", err
	}
	unlock := m.lock(id)
	defer unlock()

	sub := filepath.Join(m.uppers, id)
	if !exists(sub) {
		if err := createSubvol(m.uppers, id); err != nil {
			return "", fmt.Errorf("rootfs: %w", err)
		}
	}
	qid, err := subvolID(sub)
	if err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if weaken.Off(weaken.DiskQuota) {
		diskBytes = 0 // setLimit(0) removes the limit
	}
	if err := setLimit(m.uppers, qid, diskBytes); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	upper, work := m.UpperDir(id), m.workDir(id)
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("rootfs: %w", err)
		}
	}
	target := m.RootfsPath(id)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	// Only host root and, with a map, the sandbox's own root group pass
	// the mount point's parent.
	parent, gid := filepath.Dir(target), 0
	if idmap.Enabled() {
		gid = int(idmap.HostID)
	}
	if err := os.Chown(parent, 0, gid); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if err := os.Chmod(parent, 0o710); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if e, ok, err := m.mountAt(target); err != nil {
		return "", err
	} else if ok {
		if e.FSType == "overlay" && strings.Contains(e.SuperOpts, lowerOpt+",") && !idmap.Enabled() {
			return target, nil
		}
		if !idmap.Enabled() {
			return "", errdefs.FailedPrecondition("sandbox %s rootfs is already mounted with other layers (%s); unmount it first", id, e.SuperOpts)
		}
		// The views cannot be compared cheaply: mount afresh.
		if err := m.unmountLocked(id); err != nil {
			return "", err
		}
	}
	if idmap.Enabled() {
		views, up, err := idmappedLayers(m.idmapDir(id), idmap, lowers, sub)
		if err != nil {
			_ = unmountUnder(m.idmapDir(id))
			return "", err
		}
		if lowerOpt, err = lowerdirOption(views); err != nil {
			_ = unmountUnder(m.idmapDir(id))
			return "", err
		}
		upper, work = filepath.Join(up, "upper"), filepath.Join(up, "work")
	}
	data := lowerOpt + ",upperdir=" + upper + ",workdir=" + work + ",index=off"
	if len(data) > maxMountData {
		return "", errdefs.InvalidArgument("sandbox %s: overlay options are %d bytes, over the %d-byte mount limit (%d layers); keep layer paths short or flatten the image", id, len(data), maxMountData, len(lowers))
	}
	mount := func() error { return unix.Mount("overlay", target, "overlay", 0, data) }
	if idmap.Enabled() {
		mount = func() error { return mountAsMappedRoot(idmap, target, data) }
	}
	if err := mount(); err != nil {
		_ = unmountUnder(m.idmapDir(id))
		return "", fmt.Errorf("rootfs: mount overlay for %s: %w", id, err)
	}
	// overlayfs falls back to a read-only mount when it cannot use its
	// work dir; a sandbox never starts on a silently degraded root.
	var sfs unix.Statfs_t
	if err := unix.Statfs(target, &sfs); err != nil || sfs.Flags&unix.ST_RDONLY != 0 {
		_ = m.unmountLocked(id)
		return "", errdefs.FailedPrecondition("rootfs: overlay for %s came up read-only (see the kernel log)", id)
	}
	return target, nil
}

// idmapDir holds a sandbox's idmapped layer views (l/<n>, u).
func (m *Manager) idmapDir(id string) string { return filepath.Join(m.sandboxes, id, "idmap") }

// lowerdirOption builds "lowerdir=top:...:bottom" from lowest-first paths.
func lowerdirOption(lowers []string) (string, error) {
	parts := make([]string, len(lowers))
	for i, l := range lowers {
		if !filepath.IsAbs(l) {
			return "", errdefs.InvalidArgument("lower layer %q is not an absolute path", l)
		}
		// ',' and ':' are overlay's separators and '\\' its escape; a path
		// holding one would be parsed as extra options or layers.
		if strings.ContainsAny(l, ",:\\\n") {
			return "", errdefs.InvalidArgument("lower layer path %q contains a character overlay cannot take (',', ':' or '\\')", l)
		}
		st, err := os.Stat(l)
		if err != nil {
			return "", errdefs.NotFound("lower layer %s: %w", l, err)
		}
		if !st.IsDir() {
			return "", errdefs.InvalidArgument("lower layer %s is not a directory", l)
		}
		parts[len(lowers)-1-i] = filepath.Clean(l)
	}
	return "lowerdir=" + strings.Join(parts, ":"), nil
}

// Unmount unmounts id's rootfs, keeping its writable layer. Not mounted is
// not an error.
func (m *Manager) Unmount(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := m.lock(id)
	defer unlock()
	return m.unmountLocked(id)
}

func (m *Manager) unmountLocked(id string) error {
	if err := m.unmountRootfs(id); err != nil {
		return err
	}
	// The idmapped views under the overlay, once it is gone: those
	// idmappedLayers made, without reading mountinfo; anything else found
	// there, through mountinfo.
	if removeViews(m.idmapDir(id)) {
		return nil
	}
	if err := unmountUnder(m.idmapDir(id)); err != nil {
		return err
	}
	if err := os.RemoveAll(m.idmapDir(id)); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	return nil
}

// removeViews unmounts and removes the views idmappedLayers made under
// dir (l/<n> for the lowers, u for the upper) and dir itself, without a
// read of mountinfo (see mountRoot). It only unmounts what statx calls a
// mount point and only removes empty directories (never recursively), so
// nothing below a mount is ever deleted; it reports false, leaving the
// rest to the mountinfo path, for anything else (another entry, a mount
// that stays, a kernel that cannot tell).
func removeViews(dir string) bool {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return true
	}
	lowers, err := os.ReadDir(filepath.Join(dir, "l"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	var views []string
	for _, e := range lowers {
		views = append(views, filepath.Join(dir, "l", e.Name()))
	}
	views = append(views, filepath.Join(dir, "u"))
	for _, v := range views {
		for i := 0; ; i++ {
			root, known := mountRoot(v)
			if !known || i == 8 {
				return false
			}
			if !root {
				break
			}
			if err := unix.Unmount(v, 0); err != nil {
				if !errors.Is(err, unix.EBUSY) || unix.Unmount(v, unix.MNT_DETACH) != nil {
					return false
				}
			}
		}
		if err := os.Remove(v); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	for _, d := range []string{filepath.Join(dir, "l"), dir} {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

func (m *Manager) unmountRootfs(id string) error {
	if err := m.unmountAt(m.RootfsPath(id)); err != nil {
		return err
	}
	// A rootfs mounted by an older berth, before mount points moved to
	// MountDir (an adopted sandbox going to sleep after an upgrade).
	if legacy := filepath.Join(m.sandboxes, id, "rootfs"); legacy != m.RootfsPath(id) {
		if err := m.unmountAt(legacy); err != nil {
			return err
		}
		_ = os.Remove(legacy)
	}
	return nil
}

func (m *Manager) unmountAt(target string) error {
	for i := 0; i < 8; i++ { // stacked mounts (a crash between mounts) are all removed
		ok, known := mountRoot(target)
		if !known {
			var err error
			if _, ok, err = m.mountAt(target); err != nil {
				return err
			}
		}
		if !ok {
			return nil
		}
		if err := unix.Unmount(target, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				// A host process has its cwd or a file in there; the
				// container's own mount namespace has its own copy. Detach
				// so the mount disappears once they let go.
				err = unix.Unmount(target, unix.MNT_DETACH)
			}
			if err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("rootfs: unmount %s: %w", target, err)
			}
		}
	}
	return nil
}

// Remove unmounts id's rootfs and deletes its writable layer and disk quota.
// Removing an unknown id is not an error.
func (m *Manager) Remove(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := m.lock(id)
	defer unlock()
	if err := m.unmountLocked(id); err != nil {
		return err
	}
	sub := filepath.Join(m.uppers, id)
	if exists(sub) {
		qid, idErr := subvolID(sub)
		if idErr != nil {
			// Not a subvolume (should not happen): remove as a tree.
			if err := os.RemoveAll(sub); err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
		} else {
			if err := destroySubvol(m.uppers, id); err != nil {
				return fmt.Errorf("rootfs: %w", err)
			}
			removeQgroup(m.uppers, qid)
		}
	}
	if err := os.Remove(m.RootfsPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rootfs: %w", err)
	}
	_ = os.Remove(filepath.Join(m.mountDir, id)) // only if empty: the controller may keep a bundle there
	_ = os.Remove(filepath.Join(m.sandboxes, id))
	return nil
}

// Mounted lists the ids whose rootfs is currently mounted, for reconcile.
func (m *Manager) Mounted(ctx context.Context) ([]string, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, e := range ms {
		// <mountDir>/<id>/rootfs, or an idmapped view
		// <sandboxes>/<id>/idmap/... left by a crash.
		var rest string
		if r, ok := strings.CutPrefix(e.Point, m.mountDir+"/"); ok {
			rest = r
		} else if r, ok := strings.CutPrefix(e.Point, m.sandboxes+"/"); ok {
			rest = r
		} else {
			continue
		}
		id, _, _ := strings.Cut(rest, "/")
		if validID(id) == nil && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Known lists the ids that have a writable layer.
func (m *Manager) Known(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(m.uppers)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && validID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

func (m *Manager) mountAt(target string) (mountEntry, bool, error) {
	if root, known := mountRoot(target); known && !root {
		return mountEntry{}, false, nil // the common case, without mountinfo
	}
	ms, err := mounts()
	if err != nil {
		return mountEntry{}, false, err
	}
	var last mountEntry
	found := false
	for _, e := range ms {
		if e.Point == target {
			last, found = e, true // the last entry is the top of a stack
		}
	}
	return last, found, nil
}

func (m *Manager) isMountPoint(p, fstype string) (bool, error) {
	e, ok, err := m.mountAt(p)
	return ok && e.FSType == fstype, err
}

func (m *Manager) lock(id string) func() {
	m.mu.Lock()
	l := m.locks[id]
	if l == nil {
		l = &idLock{}
		m.locks[id] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, id)
		}
		m.mu.Unlock()
	}
}

// validID keeps ids usable as one path element and as a subvolume name.
func validID(id string) error {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return errdefs.InvalidArgument("invalid sandbox id %q", id)
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return errdefs.InvalidArgument("invalid sandbox id %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

package rootfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Read-only snapshots of a sandbox's writable layer, so a sandbox snapshot
// freezes the container only for as long as a btrfs snapshot takes (one
// transaction commit, milliseconds) and not for as long as tar+zstd of the
// whole upper takes: the archive is made afterwards from the frozen-in-time
// copy while the sandbox runs on.
const (
	// _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2) and
	// _IOW(0x94, 63, ...): the v2 argument struct is exactly 4096 bytes.
	iocSnapCreateV2  = 0x50009417
	iocSnapDestroyV2 = 0x5000943F

	subvolRdonly = 1 << 1 // BTRFS_SUBVOL_RDONLY

	// upperSnapPrefix starts every snapshot subvolume name. '@' is not
	// allowed in sandbox ids (validID), so Known never reports a snapshot
	// as a sandbox and no sandbox id can name (or Remove) a snapshot.
	upperSnapPrefix = ".snap@"
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

// SnapshotUpper takes a read-only btrfs snapshot of sandbox id's writable
// layer and returns the path of the snapshot's copy of upper/ plus a
// release that deletes the snapshot. It is a copy-on-write snapshot: it
// costs no data copy, and later writes by the sandbox do not change it.
//
// The caller freezes the container and calls syncfs on the upper first, so
// the snapshot is a consistent point in time; btrfs itself flushes pending
// delayed allocations of the source before it snapshots.
//
// While a snapshot exists, extents the sandbox overwrites or deletes stay
// allocated (the snapshot still references them); under simple quotas they
// stay charged to the sandbox until release. Release promptly.
func (m *Manager) SnapshotUpper(ctx context.Context, id string) (string, func() error, error) {
	if err := validID(id); err != nil {
		return "", nil, err
	}
	if err := ctx.Err(); err != nil {
		return "", nil, err
	}
	unlock := m.lock(id)
	defer unlock()

	src := filepath.Join(m.uppers, id)
	if !exists(src) {
		return "", nil, errdefs.NotFound("sandbox %s has no writable layer", id)
	}
	if _, err := subvolID(src); err != nil {
		return "", nil, fmt.Errorf("rootfs: %w", err)
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", nil, err
	}
	name := upperSnapPrefix + id + "@" + hex.EncodeToString(rnd[:])
	if err := snapshotSubvol(src, m.uppers, name, true); err != nil {
		return "", nil, fmt.Errorf("rootfs: snapshot writable layer of %s: %w", id, err)
	}
	snap := filepath.Join(m.uppers, name)
	var once sync.Once
	var relErr error
	release := func() error {
		once.Do(func() { relErr = m.destroyUpperSnapshot(name) })
		return relErr
	}
	upper := filepath.Join(snap, "upper")
	if st, err := os.Lstat(upper); err != nil || !st.IsDir() {
		// Mount makes upper/ right after the subvolume, so this is a
		// layer that was never mounted (or was tampered with).
		release()
		return "", nil, errdefs.FailedPrecondition("sandbox %s writable layer has no upper directory", id)
	}
	return upper, release, nil
}

// PruneUpperSnapshots deletes snapshots left behind by a crash between
// SnapshotUpper and its release. Call it at reconcile, before any new
// snapshot is taken (the data-dir lock guarantees no other daemon owns
// them).
func (m *Manager) PruneUpperSnapshots(ctx context.Context) error {
	ents, err := os.ReadDir(m.uppers)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), upperSnapPrefix) && e.IsDir() {
			errs = append(errs, m.destroyUpperSnapshot(e.Name()))
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) destroyUpperSnapshot(name string) error {
	if !strings.HasPrefix(name, upperSnapPrefix) || strings.ContainsRune(name, '/') {
		return errdefs.InvalidArgument("not an upper snapshot: %q", name)
	}
	p := filepath.Join(m.uppers, name)
	qid, err := subvolID(p)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := destroySubvolV2(m.uppers, name); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	removeQgroup(m.uppers, qid)
	return nil
}

// snapshotSubvol snapshots the subvolume src as parent/name.
func snapshotSubvol(src, parent, name string, readOnly bool) error {
	if len(name) >= len(volArgsV2{}.Name) {
		return errdefs.InvalidArgument("snapshot name too long")
	}
	sfd, err := openDir(src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	pfd, err := openDir(parent)
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

// destroySubvolV2 deletes subvolume name in parent with the v2 ioctl
// (by name), which also accepts read-only subvolumes.
func destroySubvolV2(parent, name string) error {
	fd, err := openDir(parent)
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

// LayerFromUpperSnapshot turns a snapshot that SnapshotUpper returned (its
// upper/ path) into a read-only layer at dst that outlives the release:
// the subvolume is made writable just long enough for clean to bring
// upper/ into the form a restore from the snapshot's blob gives (the
// caller's rules), for its work/ to be removed and for it to be renamed to
// dst (a path on the uppers filesystem; btrfs cannot rename a read-only
// subvolume), and is made read-only again there. The layer is dst/upper;
// delete it with DestroyLayer. If it fails before the rename, the
// snapshot stays where it was and release deletes it; after, it is at dst.
func (m *Manager) LayerFromUpperSnapshot(upper string, clean func(dir string) error, dst string) error {
	sub := filepath.Dir(filepath.Clean(upper))
	if filepath.Base(upper) != "upper" || filepath.Dir(sub) != m.uppers || !strings.HasPrefix(filepath.Base(sub), upperSnapPrefix) {
		return errdefs.InvalidArgument("rootfs: %s is not an upper snapshot", upper)
	}
	dst = filepath.Clean(dst)
	if !hasPathPrefix(dst, m.uppers) {
		return errdefs.InvalidArgument("rootfs: %s is outside the uppers filesystem", dst)
	}
	if _, err := subvolID(sub); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := setReadOnly(sub, false); err != nil {
		return err
	}
	at := sub
	err := clean(upper)
	if err == nil {
		// overlay's work dir is never part of a layer.
		err = os.RemoveAll(filepath.Join(sub, "work"))
	}
	if err == nil {
		if err = os.Rename(sub, dst); err == nil {
			at = dst
		}
	}
	if rerr := setReadOnly(at, true); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("rootfs: layer from %s: %w", upper, err)
	}
	return nil
}

// DestroyLayer deletes a subvolume that LayerFromUpperSnapshot made, where
// it now is. A path that is not a subvolume root on this uppers
// filesystem is refused.
func (m *Manager) DestroyLayer(path string) error {
	path = filepath.Clean(path)
	if !hasPathPrefix(path, m.uppers) || path == m.uppers {
		return errdefs.InvalidArgument("rootfs: %s is outside the uppers filesystem", path)
	}
	qid, err := subvolID(path)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	if err := destroySubvolV2(filepath.Dir(path), filepath.Base(path)); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	removeQgroup(m.uppers, qid)
	return nil
}

// setReadOnly sets or clears a subvolume's read-only flag.
func setReadOnly(sub string, ro bool) error {
	fd, err := openDir(sub)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var flags uint64
	if err := ioctl(fd, iocSubvolGetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("rootfs: get flags of %s: %w", sub, err)
	}
	if ro {
		flags |= subvolRdonly
	} else {
		flags &^= subvolRdonly
	}
	if err := ioctl(fd, iocSubvolSetflags, unsafe.Pointer(&flags)); err != nil {
		return fmt.Errorf("rootfs: set flags of %s: %w", sub, err)
	}
	return nil
}

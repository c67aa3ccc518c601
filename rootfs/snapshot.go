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

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Read-only snapshots of a sandbox's writable layer, so a sandbox snapshot
// freezes the container only for as long as a btrfs snapshot takes (one
// transaction commit, milliseconds) and not for as long as tar+zstd of the
// whole upper takes: the archive is made afterwards from the frozen-in-time
// copy while the sandbox runs on.

const (
	// upperSnapPrefix starts every snapshot subvolume name. '@' is not
	// allowed in sandbox ids (validID), so Known never reports a snapshot
	// as a sandbox and no sandbox id can name (or Remove) a snapshot.
	upperSnapPrefix = ".snap@"
)

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

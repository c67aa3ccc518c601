package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/btrfs"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/tenant"
	"github.com/berth-sh/berth/store"
)

// DefaultImageSize is the apparent size of the sparse volumes image made
// when the data dir is not on btrfs. It bounds the sum of all volumes;
// host space is used as data is written.
const DefaultImageSize int64 = 64 << 30

// Options configures Open.
type Options struct {
	// ImageSize is the size of the sparse volumes image created on first
	// Open when the data dir is not on btrfs (default DefaultImageSize).
	// It is not changed for an existing image.
	ImageSize int64
	// Node is this node's name, recorded as where a volume's data lives.
	Node string
	// Sync moves a volume's data between nodes (cluster mode); default
	// Local, which keeps it where it is.
	Sync Syncer
	// Live reports whether a sandbox still holds its volume claims (it
	// exists and runs or is starting). A claim whose holder is not live
	// (a crash between a stop and its release) is taken over instead of
	// refusing the mount. nil: every claim is live.
	Live func(ctx context.Context, sandbox string) bool
}

// Manager owns the volumes of one data dir. It is safe for concurrent use.
type Manager struct {
	mnt  string // the btrfs directory (a loop mount or a directory on btrfs)
	dir  string // mnt/v: one subvolume per volume
	st   store.Volumes
	opts Options
	mu   sync.Mutex // serializes the btrfs side of create, snapshot, fork, remove
}

// Open prepares <dataDir>/volumes: a directory on btrfs when dataDir is on
// btrfs, else a sparse btrfs image (<dataDir>/volumes.img, formatted the
// first time) loop-mounted there. Quota groups are enabled.
func Open(ctx context.Context, dataDir string, st store.Volumes, opts Options) (*Manager, error) {
	if opts.ImageSize == 0 {
		opts.ImageSize = DefaultImageSize
	}
	if opts.ImageSize < 256<<20 {
		return nil, errdefs.InvalidArgument("volumes image size %d is below the 256 MiB btrfs needs", opts.ImageSize)
	}
	if opts.Sync == nil {
		opts.Sync = Local{}
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{mnt: filepath.Join(abs, "volumes"), st: st, opts: opts}
	m.dir = filepath.Join(m.mnt, "v")
	if err := os.MkdirAll(m.mnt, 0o700); err != nil {
		return nil, fmt.Errorf("volume: %w", err)
	}
	if !btrfs.IsBtrfs(m.mnt) {
		if err := m.mountImage(ctx, filepath.Join(abs, "volumes.img")); err != nil {
			return nil, err
		}
	}
	if !btrfs.IsBtrfs(m.mnt) {
		return nil, errdefs.FailedPrecondition("volume: %s is not on btrfs", m.mnt)
	}
	if _, err := btrfs.EnableQuota(m.mnt); err != nil {
		return nil, fmt.Errorf("volume: %w", err)
	}
	// Only host root passes: a volume's path on the host is never
	// reachable by anything but berth.
	for _, d := range []string{m.mnt, m.dir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("volume: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("volume: %w", err)
		}
	}
	return m, nil
}

func (m *Manager) mountImage(ctx context.Context, img string) error {
	if _, err := os.Lstat(img); errors.Is(err, os.ErrNotExist) {
		// Format under a temporary name so a crash never leaves a
		// half-made image that a later Open would mount.
		tmp := img + ".tmp"
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("volume: %w", err)
		}
		err = f.Truncate(m.opts.ImageSize)
		f.Close()
		if err == nil {
			err = btrfs.Mkfs(ctx, tmp)
		}
		if err == nil {
			err = os.Rename(tmp, img)
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("volume: create volumes image: %w", err)
		}
	}
	if err := btrfs.AttachAndMount(img, m.mnt, "discard=async"); err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	return nil
}

// Shutdown unmounts the volumes image (tests and uninstall; the daemon
// leaves it mounted). Volumes mounted in sandboxes keep it busy: it is
// detached then and goes when they do.
func (m *Manager) Shutdown() error {
	err := unix.Unmount(m.mnt, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(m.mnt, unix.MNT_DETACH)
	}
	if errors.Is(err, unix.EINVAL) { // not a mount (a directory on btrfs)
		return nil
	}
	return err
}

// get returns a volume's record, hiding other tenants' volumes.
func (m *Manager) get(ctx context.Context, name string) (store.Volume, error) {
	if err := api.ValidateVolumeName(name); err != nil {
		return store.Volume{}, err
	}
	v, err := m.st.GetVolume(ctx, name)
	if err != nil {
		return v, err
	}
	if t := tenant.From(ctx); t != "" && v.Tenant != t {
		return store.Volume{}, errdefs.NotFound("volume %q not found", name)
	}
	return v, nil
}

// Create makes an empty volume with a quota of sizeBytes (0: the default).
func (m *Manager) Create(ctx context.Context, name string, sizeBytes int64) (api.Volume, error) {
	if err := api.ValidateVolumeName(name); err != nil {
		return api.Volume{}, err
	}
	if err := api.ValidateVolumeSize(sizeBytes); err != nil {
		return api.Volume{}, err
	}
	if sizeBytes == 0 {
		sizeBytes = api.DefaultVolumeSize
	}
	return m.make(ctx, store.Volume{Name: name, SizeBytes: sizeBytes}, func() error {
		if err := btrfs.CreateSubvol(m.dir, name); err != nil {
			return err
		}
		// Every user of every sandbox may write a new volume's root
		// (images differ in who their user is); what it makes inside
		// keeps its owner.
		return os.Chmod(filepath.Join(m.dir, name), 0o777)
	})
}

// Snapshot takes a read-only, copy-on-write snapshot of src as the volume
// name. It sees src's content as of now, whatever src's writer does next.
func (m *Manager) Snapshot(ctx context.Context, src, name string) (api.Volume, error) {
	if err := api.ValidateVolumeName(name); err != nil {
		return api.Volume{}, err
	}
	sv, err := m.get(ctx, src)
	if err != nil {
		return api.Volume{}, err
	}
	return m.make(ctx, store.Volume{Name: name, SizeBytes: sv.SizeBytes, Snapshot: true, Origin: src}, func() error {
		return btrfs.SnapshotSubvol(filepath.Join(m.dir, src), m.dir, name, true)
	})
}

// Fork makes a new writable volume name that starts as a copy of src (a
// volume or a snapshot) by reference: a btrfs snapshot, so no data is
// copied; the two diverge from then on. sizeBytes 0 keeps src's quota.
func (m *Manager) Fork(ctx context.Context, src, name string, sizeBytes int64) (api.Volume, error) {
	if err := api.ValidateVolumeName(name); err != nil {
		return api.Volume{}, err
	}
	if err := api.ValidateVolumeSize(sizeBytes); err != nil {
		return api.Volume{}, err
	}
	sv, err := m.get(ctx, src)
	if err != nil {
		return api.Volume{}, err
	}
	if sizeBytes == 0 {
		sizeBytes = sv.SizeBytes
	}
	return m.make(ctx, store.Volume{Name: name, SizeBytes: sizeBytes, Origin: src}, func() error {
		return btrfs.SnapshotSubvol(filepath.Join(m.dir, src), m.dir, name, false)
	})
}

// make creates v's subvolume with mk, sets its quota and records it. A
// subvolume left by a crash between the two (on disk, no record) is
// deleted first; a recorded name is already-exists.
func (m *Manager) make(ctx context.Context, v store.Volume, mk func() error) (api.Volume, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.st.GetVolume(ctx, v.Name); err == nil {
		return api.Volume{}, errdefs.AlreadyExists("volume %q already exists", v.Name)
	} else if !errdefs.IsKind(err, errdefs.ErrNotFound) {
		return api.Volume{}, err
	}
	if _, err := os.Lstat(filepath.Join(m.dir, v.Name)); err == nil {
		if err := m.destroy(v.Name); err != nil {
			return api.Volume{}, err
		}
	}
	if err := mk(); err != nil {
		return api.Volume{}, fmt.Errorf("volume: %w", err)
	}
	undo := func() { _ = m.destroy(v.Name) }
	if !v.Snapshot {
		qid, err := btrfs.SubvolID(filepath.Join(m.dir, v.Name))
		if err == nil {
			err = btrfs.SetLimit(m.mnt, qid, v.SizeBytes)
		}
		if err != nil {
			undo()
			return api.Volume{}, fmt.Errorf("volume: %w", err)
		}
	}
	v.Node, v.Tenant, v.CreatedAt = m.opts.Node, tenant.From(ctx), time.Now().UTC().Truncate(time.Millisecond)
	ver, err := m.st.PutVolume(ctx, v)
	if err != nil {
		undo()
		return api.Volume{}, err
	}
	v.Version = ver
	return m.view(v), nil
}

// destroy deletes a volume's subvolume (read-only or not) and its quota group.
func (m *Manager) destroy(name string) error {
	qid, qerr := btrfs.SubvolID(filepath.Join(m.dir, name))
	if err := btrfs.DestroySubvolV2(m.dir, name); err != nil {
		return fmt.Errorf("volume: %w", err)
	}
	if qerr == nil {
		btrfs.RemoveQgroup(m.mnt, qid)
	}
	return nil
}

// Get returns one volume with its usage.
func (m *Manager) Get(ctx context.Context, name string) (api.Volume, error) {
	v, err := m.get(ctx, name)
	if err != nil {
		return api.Volume{}, err
	}
	return m.view(v), nil
}

// List returns the caller's volumes, ordered by name.
func (m *Manager) List(ctx context.Context) ([]api.Volume, error) {
	all, err := m.st.ListVolumes(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.Volume{}
	t := tenant.From(ctx)
	for _, v := range all {
		if t == "" || v.Tenant == t {
			out = append(out, m.view(v))
		}
	}
	return out, nil
}

// Remove deletes a volume and its data. A volume that a live sandbox
// mounts is refused (failed precondition, naming the sandboxes).
// Snapshots and forks of it are independent and stay.
func (m *Manager) Remove(ctx context.Context, name string) error {
	v, err := m.get(ctx, name)
	if err != nil {
		return err
	}
	if users := m.liveUsers(ctx, v); len(users) > 0 {
		return errdefs.FailedPrecondition("volume %q is in use by sandbox %v; destroy or stop it first", name, users)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// The record goes first, conditional on the version read, so a mount
	// that claimed the volume meanwhile wins and the data stays.
	if err := m.st.DeleteVolume(ctx, name, v.Version); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(m.dir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return m.destroy(name)
}

func (m *Manager) live(ctx context.Context, sandbox string) bool {
	return m.opts.Live == nil || m.opts.Live(ctx, sandbox)
}

func (m *Manager) liveUsers(ctx context.Context, v store.Volume) []string {
	var users []string
	if v.Writer != "" && m.live(ctx, v.Writer) {
		users = append(users, v.Writer)
	}
	for _, r := range v.Readers {
		if m.live(ctx, r) && !slices.Contains(users, r) {
			users = append(users, r)
		}
	}
	return users
}

func (m *Manager) view(v store.Volume) api.Volume {
	out := api.Volume{Name: v.Name, SizeBytes: v.SizeBytes, UsedBytes: -1, Snapshot: v.Snapshot, Origin: v.Origin,
		Writer: v.Writer, Readers: v.Readers, Node: v.Node, CreatedAt: v.CreatedAt}
	if qid, err := btrfs.SubvolID(filepath.Join(m.dir, v.Name)); err == nil {
		if rfer, _, err := btrfs.Usage(m.mnt, qid); err == nil {
			out.UsedBytes = rfer
		}
	}
	return out
}

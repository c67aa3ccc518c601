package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/store"
)

const (
	defaultSnapshotTTL = 30 * 24 * time.Hour
	defaultBackupTTL   = 72 * time.Hour
	// MaxChain bounds how many snapshot layers a sandbox stacks. A
	// snapshot that would be deeper is squashed into one layer over the
	// base image: each lower costs a lookup on every path miss, and the
	// overlay mount option that lists them is limited to one page.
	MaxChain = 16
)

func snapKey(id string) string   { return "snapshots/" + id + ".tar.zst" }
func backupKey(id string) string { return "backups/" + id + ".tar.zst" }

func newArtifactID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

func (m *Manager) snapshotsReady() error {
	if m.cfg.Blobs == nil || m.cfg.Snapshots == nil {
		return errdefs.FailedPrecondition("snapshots need a blob store; this daemon has none configured")
	}
	if _, ok := m.cfg.Rootfs.(UpperSnapshots); !ok {
		return errdefs.FailedPrecondition("this rootfs driver cannot snapshot writable layers")
	}
	return nil
}

func parseTTL(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Minute || d > 8760*time.Hour {
		return 0, errdefs.InvalidArgument("ttl %q must be a duration between 1m and 8760h, like \"72h\"", s)
	}
	return d, nil
}

func snapToAPI(s store.Snapshot) api.Snapshot {
	return api.Snapshot{ID: s.ID, Name: s.Name, Sandbox: s.Sandbox, SizeBytes: s.SizeBytes,
		UncompressedBytes: s.UncompressedBytes, Files: s.Files, SHA256: s.SHA256,
		BaseImageDigest: s.BaseImageDigest, Parent: s.Parent, Depth: s.Depth, FreezeMs: s.FreezeMs,
		CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt}
}

// Snapshot implements control.Snapshots. A running sandbox is frozen only
// while its writable layer is copied (a btrfs snapshot: milliseconds);
// compression and upload run afterwards from the frozen-in-time copy, while
// the sandbox works on. The layer is primed (LayerPrimer): a restore on
// this host needs no fetch of the blob just written.
func (m *Manager) Snapshot(ctx context.Context, name string, req api.SnapshotRequest) (api.Snapshot, error) {
	return m.snapshot(ctx, name, req, true, false)
}

// snapshot is Snapshot; with prime, the layer is also made ready on this
// host as it is captured (see LayerPrimer). With forFork, the snapshot is
// remembered as the source's fork snapshot (reusableForkSnapshot).
func (m *Manager) snapshot(ctx context.Context, name string, req api.SnapshotRequest, prime, forFork bool) (api.Snapshot, error) {
	if err := m.snapshotsReady(); err != nil {
		return api.Snapshot{}, err
	}
	ttl, err := parseTTL(req.TTL, defaultSnapshotTTL)
	if err != nil {
		return api.Snapshot{}, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return api.Snapshot{}, err
	}
	if !a.exists {
		m.drop(a)
		a.mu.Unlock()
		return api.Snapshot{}, errdefs.NotFound("sandbox %q not found", name)
	}
	m.touch(a)
	rec := a.rec // a copy: the capture below runs without the lock
	// Taken before the flush and the freeze: everything changed after it
	// has a later ctime (reusableForkSnapshot).
	tCopy := time.Now()
	dir, release, freeze, err := m.freezeCopy(ctx, a)
	a.mu.Unlock()
	if err != nil {
		return api.Snapshot{}, err
	}
	defer release()
	sn, err := m.storeLayer(ctx, rec, dir, req.Name, ttl, freeze, prime)
	if err != nil {
		return api.Snapshot{}, err
	}
	if forFork {
		if a, err := m.lock(ctx, name); err == nil {
			if a.exists && a.rec.ID == rec.ID {
				a.forkSnap = forkSnap{id: sn.ID, sandboxID: rec.ID, copied: tCopy}
			}
			a.mu.Unlock()
		}
	}
	m.journal(ctx, name, "snapshot", sn.ID)
	return snapToAPI(sn), nil
}

// freezeCopy takes an instant read-only copy of a's upper. If a runs, its
// processes are frozen for exactly that long, so the copy is
// crash-consistent. Callers hold a.mu.
func (m *Manager) freezeCopy(ctx context.Context, a *actor) (string, func() error, time.Duration, error) {
	us := m.cfg.Rootfs.(UpperSnapshots)
	if _, err := os.Stat(m.cfg.Rootfs.UpperDir(a.rec.ID)); err != nil {
		return "", nil, 0, errdefs.FailedPrecondition("sandbox %q has no writable layer on this host yet", a.name)
	}
	running := a.rec.State == api.StateRunning
	// Flush dirty data while the sandbox still runs, so the btrfs
	// snapshot taken during the freeze has little left to write.
	if fd, err := unix.Open(m.cfg.Rootfs.UpperDir(a.rec.ID), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
	t0 := time.Now()
	if running {
		if err := m.cfg.Runtime.Pause(ctx, a.rec.ID); err != nil {
			return "", nil, 0, fmt.Errorf("freeze %q: %w", a.name, err)
		}
	}
	dir, release, err := us.SnapshotUpper(ctx, a.rec.ID)
	if running {
		if rerr := m.cfg.Runtime.Resume(context.WithoutCancel(ctx), a.rec.ID); rerr != nil && err == nil {
			err = fmt.Errorf("thaw %q: %w", a.name, rerr)
		}
	}
	freeze := time.Since(t0)
	if err != nil {
		if release != nil {
			release()
		}
		return "", nil, 0, err
	}
	return dir, release, freeze, nil
}

// storeLayer captures upperDir (the changes since rec's chain) as a new
// snapshot, squashing when the chain would grow past MaxChain. The record
// is written only after the blob is complete, so a crash leaves at most an
// unreferenced blob, which reconcile removes.
// With prime, a Snapshotter that is a LayerPrimer builds the layer on this
// host as it captures it.
func (m *Manager) storeLayer(ctx context.Context, rec store.Sandbox, upperDir, name string, ttl, freeze time.Duration, prime bool) (store.Snapshot, error) {
	id := newArtifactID("snap_")
	chain := append([]store.Layer(nil), rec.Chain...)
	parent := ""
	if len(chain) > 0 {
		parent = chain[len(chain)-1].ID
	}
	produce := func(w io.Writer) (CaptureStats, error) { return m.cfg.Snapshots.Capture(ctx, upperDir, w) }
	var commit func(id, sha256 string) error
	abort := func() {}
	if lp, ok := m.cfg.Snapshots.(LayerPrimer); ok && prime {
		produce = func(w io.Writer) (CaptureStats, error) {
			st, c, a, err := lp.CapturePrimed(ctx, upperDir, w)
			if err == nil {
				commit, abort = c, a
			}
			return st, err
		}
	}
	if len(chain)+1 > MaxChain {
		dirs, err := m.chainDirs(ctx, chain)
		if err != nil {
			return store.Snapshot{}, err
		}
		layers := append(dirs, upperDir)
		produce = func(w io.Writer) (CaptureStats, error) { return m.cfg.Snapshots.Squash(ctx, layers, w) }
		chain, parent = nil, ""
	}
	st, err := m.upload(ctx, snapKey(id), produce)
	if err != nil {
		abort()
		return store.Snapshot{}, fmt.Errorf("snapshot of %q: %w", rec.Name, err)
	}
	failpoint.Hit("snapshot.uploaded")
	now := time.Now().UTC()
	chain = append(chain, store.Layer{ID: id, SHA256: st.SHA256})
	sn := store.Snapshot{
		ID: id, Name: name, Sandbox: rec.Name, SizeBytes: st.CompressedBytes,
		UncompressedBytes: st.UncompressedBytes, Files: st.Files, SHA256: st.SHA256,
		BaseImageDigest: rec.ImageDigest, Parent: parent, Depth: len(chain),
		FreezeMs: float64(freeze.Microseconds()) / 1000, Chain: chain, TTL: ttl,
		CreatedAt: now, ExpiresAt: now.Add(ttl), Tenant: rec.Tenant,
	}
	if err := m.st.PutSnapshot(ctx, sn); err != nil {
		abort()
		_ = m.cfg.Blobs.Delete(context.WithoutCancel(ctx), snapKey(id))
		return store.Snapshot{}, err
	}
	if commit != nil {
		// A layer that fails to prime is fetched on first use instead.
		if err := commit(id, st.SHA256); err != nil {
			m.cfg.Logf("snapshot %s: prime the local layer: %v", id, err)
		}
	}
	return sn, nil
}

// upload streams what produce writes into the blob store under key and
// checks that both ends saw the same bytes.
func (m *Manager) upload(ctx context.Context, key string, produce func(io.Writer) (CaptureStats, error)) (CaptureStats, error) {
	pr, pw := io.Pipe()
	type result struct {
		st  CaptureStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := produce(pw)
		pw.CloseWithError(err)
		done <- result{st, err}
	}()
	info, err := m.cfg.Blobs.Put(ctx, key, pr, "")
	pr.CloseWithError(fmt.Errorf("upload ended: %v", err))
	res := <-done
	if res.err != nil {
		if err == nil {
			_ = m.cfg.Blobs.Delete(context.WithoutCancel(ctx), key)
		}
		return CaptureStats{}, res.err
	}
	if err != nil {
		return CaptureStats{}, err
	}
	if res.st.SHA256 != "" && res.st.SHA256 != info.SHA256 {
		_ = m.cfg.Blobs.Delete(context.WithoutCancel(ctx), key)
		return CaptureStats{}, errdefs.Internal("blob %s: stored digest %s differs from the captured %s", key, info.SHA256, res.st.SHA256)
	}
	res.st.SHA256, res.st.CompressedBytes = info.SHA256, info.Size
	return res.st, nil
}

// chainDirs makes every layer of a chain ready on this host, fetching and
// verifying blobs the first time.
func (m *Manager) chainDirs(ctx context.Context, chain []store.Layer) ([]string, error) {
	dirs := make([]string, 0, len(chain))
	for _, l := range chain {
		key := snapKey(l.ID)
		id := l.ID
		dir, err := m.cfg.Snapshots.Layer(ctx, l.ID, l.SHA256, func(ctx context.Context) (io.ReadCloser, error) {
			rc, _, err := m.cfg.Blobs.Get(ctx, key)
			if errdefs.Code(err) == "not_found" {
				return nil, errdefs.NotFound("snapshot %s not found", id)
			}
			return rc, err
		})
		if err != nil {
			return nil, err
		}
		m.held.layer(l.ID, l.SHA256, true)
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// GetSnapshot implements control.Snapshots.
func (m *Manager) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	sn, err := m.st.GetSnapshot(ctx, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	if !mayUse(ctx, sn.Tenant) {
		return api.Snapshot{}, errdefs.NotFound("snapshot %s not found", id)
	}
	return snapToAPI(sn), nil
}

// ListSnapshots implements control.Snapshots.
func (m *Manager) ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error) {
	list, err := m.st.ListSnapshots(ctx, sandbox, name)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(list))
	for _, s := range list {
		if mayUse(ctx, s.Tenant) {
			out = append(out, snapToAPI(s))
		}
	}
	return out, nil
}

// snapshotUsers lists what still needs layer id: sandboxes and snapshots
// whose chains include it (other than the snapshot itself).
func (m *Manager) snapshotUsers(ctx context.Context, id string) ([]string, error) {
	var users []string
	recs, err := m.st.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		for _, l := range r.Chain {
			if l.ID == id {
				users = append(users, "sandbox "+r.Name)
			}
		}
	}
	snaps, err := m.st.ListSnapshots(ctx, "", "")
	if err != nil {
		return nil, err
	}
	expired, err := m.st.ExpiredSnapshots(ctx, time.Now())
	if err != nil {
		return nil, err
	}
	if m.pools.usesSnapshot(id) {
		users = append(users, "warm pool members")
	}
	for _, s := range append(snaps, expired...) {
		if s.ID == id {
			continue
		}
		for _, l := range s.Chain {
			if l.ID == id {
				users = append(users, "snapshot "+s.ID)
			}
		}
	}
	return users, nil
}

// DeleteSnapshot implements control.Snapshots. A snapshot that a sandbox or
// a later snapshot stands on cannot be deleted: restoring them needs it.
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if sn, err := m.st.GetSnapshot(ctx, id); err != nil {
		return err
	} else if !mayUse(ctx, sn.Tenant) {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	users, err := m.snapshotUsers(ctx, id)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return errdefs.FailedPrecondition("snapshot %s is still needed by %v; delete those first", id, users)
	}
	return m.forgetSnapshot(ctx, id)
}

func (m *Manager) forgetSnapshot(ctx context.Context, id string) error {
	if err := m.st.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	if err := m.cfg.Blobs.Delete(ctx, snapKey(id)); err != nil {
		m.cfg.Logf("delete snapshot blob %s: %v", id, err)
	}
	m.held.layer(id, "", false)
	if err := m.cfg.Snapshots.Forget(id); err != nil {
		m.cfg.Logf("drop cached layer %s: %v", id, err)
	}
	return nil
}

// collectSnapshots deletes expired snapshots nothing stands on, and blobs
// that no record owns (left by a crash between upload and record).
func (m *Manager) collectSnapshots(ctx context.Context) {
	if m.cfg.Blobs == nil || m.cfg.Snapshots == nil {
		return
	}
	expired, err := m.st.ExpiredSnapshots(ctx, time.Now())
	if err == nil {
		for _, s := range expired {
			if users, err := m.snapshotUsers(ctx, s.ID); err == nil && len(users) == 0 {
				_ = m.forgetSnapshot(ctx, s.ID)
			}
		}
	}
}

package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// fromSnapshot fills a new record so that it starts from snapshot id: the
// snapshot's base image digest and its whole chain. It refuses an image
// that resolves to a different digest, and renews the snapshot's TTL.
func (m *Manager) fromSnapshot(ctx context.Context, rec *store.Sandbox, id, image string) error {
	if err := m.snapshotsReady(); err != nil {
		return err
	}
	sn, err := m.st.GetSnapshot(ctx, id)
	if err != nil {
		return err // "snapshot <id> not found": never fall back to the bare image
	}
	if !mayUse(ctx, sn.Tenant) {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	if image != "" {
		img, err := m.prepare(ctx, image)
		if err != nil {
			return err
		}
		if img.Digest != sn.BaseImageDigest {
			return errdefs.FailedPrecondition("snapshot %s was taken on image %s, but %q is %s; start it without an image or with that digest", id, sn.BaseImageDigest, image, img.Digest)
		}
	}
	rec.Image, rec.ImageDigest = sn.BaseImageDigest, sn.BaseImageDigest
	if image != "" {
		rec.Image = image
	}
	rec.Snapshot, rec.Chain = id, sn.Chain
	ttl := sn.TTL
	if ttl <= 0 {
		ttl = defaultSnapshotTTL
	}
	return m.st.TouchSnapshot(ctx, id, time.Now().Add(ttl))
}

// snapshotLowers returns the chain layers for a start. If the local upper
// is gone and a persisted snapshot exists (persist=disk), that snapshot
// becomes the top of the chain and the start gets a fresh upper.
func (m *Manager) snapshotLowers(ctx context.Context, rec *store.Sandbox) ([]string, error) {
	if rec.PersistSnapshot != "" {
		if _, err := os.Stat(m.cfg.Rootfs.UpperDir(rec.ID)); os.IsNotExist(err) {
			sn, err := m.st.GetSnapshot(ctx, rec.PersistSnapshot)
			if err != nil {
				return nil, fmt.Errorf("restore persisted files: %w", err)
			}
			rec.Chain = sn.Chain
			m.journal(ctx, rec.Name, "restore-persisted", sn.ID)
		}
	}
	if len(rec.Chain) == 0 {
		return nil, nil
	}
	if m.cfg.Snapshots == nil || m.cfg.Blobs == nil {
		return nil, errdefs.FailedPrecondition("sandbox %q starts from a snapshot, but no blob store is configured", rec.Name)
	}
	return m.chainDirs(ctx, rec.Chain)
}

// persist snapshots a stopped sandbox's upper to the blob store (persist
// = disk). Failure is reported but loses nothing: the local layer stays.
// Callers hold a.mu, with the container already stopped.
func (m *Manager) persist(ctx context.Context, a *actor) error {
	if !persistsFiles(a.rec) || m.snapshotsReady() != nil {
		return nil
	}
	dir, release, freeze, err := m.freezeCopy(ctx, a)
	if err != nil {
		return err
	}
	defer release()
	old := a.rec.PersistSnapshot
	sn, err := m.storeLayer(ctx, a.rec, dir, "persist", defaultSnapshotTTL, freeze, false)
	if err != nil {
		return err
	}
	a.rec.PersistSnapshot = sn.ID
	if old != "" && old != sn.ID {
		if users, err := m.snapshotUsers(ctx, old); err == nil && len(users) == 0 {
			_ = m.forgetSnapshot(ctx, old)
		}
	}
	return nil
}

// Fork implements control.Snapshots: Count sandboxes from one fresh
// snapshot of source. All of them share its read-only layer on this host;
// each has its own empty upper, so no file is copied per fork.
func (m *Manager) Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error) {
	if req.Count < 1 || req.Count > 100 {
		return api.ForkResult{}, errdefs.InvalidArgument("count must be between 1 and 100, got %d", req.Count)
	}
	names := req.Names
	if len(names) == 0 {
		for i := 1; i <= req.Count; i++ {
			names = append(names, fmt.Sprintf("%s-fork-%d", source, i))
		}
	}
	if len(names) != req.Count {
		return api.ForkResult{}, errdefs.InvalidArgument("%d names for %d forks", len(names), req.Count)
	}
	for _, n := range names {
		if err := ValidName(n); err != nil {
			return api.ForkResult{}, err
		}
		if _, err := m.st.Get(ctx, n); err == nil {
			return api.ForkResult{}, errdefs.AlreadyExists("sandbox %q already exists", n)
		}
	}
	src, err := m.describe(ctx, source)
	if err != nil {
		return api.ForkResult{}, err
	}
	// With forkPrime the layer is built on this host while it is captured,
	// so the forks need no fetch of it.
	t0 := time.Now()
	sn, reused, err := m.reusableForkSnapshot(ctx, source)
	if err != nil {
		return api.ForkResult{}, err
	}
	if !reused {
		sn, err = m.snapshot(ctx, source, api.SnapshotRequest{Name: "fork-of-" + source}, forkPrime, true)
		if err != nil {
			return api.ForkResult{}, err
		}
	}
	tSnap := time.Since(t0)
	// Make the shared layer ready once before the forks race for it.
	if _, err := m.chainDirs(ctx, []store.Layer{{ID: sn.ID, SHA256: sn.SHA256}}); err != nil {
		return api.ForkResult{}, err
	}
	labels := map[string]string{"berth.fork-of": source}
	for k, v := range src.Labels {
		labels[k] = v
	}
	res := api.ForkResult{Snapshot: sn, Sandboxes: make([]api.Sandbox, len(names))}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, forkParallel)
	for i, n := range names {
		wg.Add(1)
		go func(i int, n string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := api.CreateSandboxRequest{Name: n, Snapshot: sn.ID, Internet: &src.Internet, Network: src.Network,
				Env: src.Env, Labels: labels, SleepAfter: src.SleepAfter, KeepAlive: &src.KeepAlive, Isolation: src.Isolation}
			if src.Instance == "custom" {
				r.Resources = &src.Resources
			} else {
				r.Instance = src.Instance
			}
			res.Sandboxes[i], errs[i] = m.createAsObject(ctx, r)
		}(i, n)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			// All or nothing: remove the forks that did start.
			for j, n := range names {
				if errs[j] == nil {
					_ = m.destroyAsObject(context.WithoutCancel(ctx), n)
				}
			}
			return api.ForkResult{}, fmt.Errorf("fork %s: %w", names[i], err)
		}
	}
	how := "snapshot"
	if reused {
		how = "reused unchanged snapshot"
	}
	m.journal(ctx, source, "fork", fmt.Sprintf("%d from %s (%s)", req.Count, sn.ID, how))
	m.cfg.Logf("fork %s: %d from %s: %s %s, forks %s", source, req.Count, sn.ID, how, tSnap.Round(time.Millisecond), (time.Since(t0) - tSnap).Round(time.Millisecond))
	return res, nil
}

// validSnapshotID reports whether a create request's snapshot field is usable.
func validSnapshotID(id string) error {
	if id == "" || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return errdefs.InvalidArgument("invalid snapshot id %q", id)
	}
	return nil
}

// persistsFiles reports whether rec's files are copied to the blob store
// at every sleep (persist disk or interval).
func persistsFiles(rec store.Sandbox) bool {
	return rec.Persist == api.PersistDisk || rec.Persist == api.PersistInterval
}

// checkpointDue reports whether a running sandbox with persist interval
// is due for a checkpoint at now. A sandbox this node has not seen
// checkpoint yet counts from its start.
func checkpointDue(rec store.Sandbox, now time.Time) bool {
	if rec.Persist != api.PersistInterval || rec.PersistEvery <= 0 || rec.State != api.StateRunning {
		return false
	}
	from := rec.LastCheckpoint
	if from.Before(rec.StartedAt) {
		from = rec.StartedAt
	}
	return !now.Before(from.Add(rec.PersistEvery))
}

// checkpoint persists a running sandbox's files now without stopping it
// (persist interval): the same snapshot a sleep takes, taken during a
// brief freeze, recorded as the sandbox's PersistSnapshot so that a wake
// on any node starts from it. A failure is logged and retried at the next
// period; nothing is lost (the local layer stays).
func (m *Manager) checkpoint(ctx context.Context, a *actor, now time.Time) {
	if !a.mu.TryLock() {
		return // busy with a lifecycle operation: the next tick retries
	}
	defer a.mu.Unlock()
	if a.deleted || !a.exists || !checkpointDue(a.rec, now) {
		return
	}
	t0 := time.Now()
	err := m.persist(ctx, a)
	a.rec.LastCheckpoint = now.UTC() // also after a failure: retry a period later, not every tick
	if serr := m.save(ctx, a); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		m.cfg.Logf("sandbox %s: checkpoint: %v (next in %s)", a.name, err, a.rec.PersistEvery)
		return
	}
	m.journal(ctx, a.name, "checkpoint", fmt.Sprintf("%s in %s", a.rec.PersistSnapshot, time.Since(t0).Round(time.Millisecond)))
}

// forkPrime makes Fork prime its layer (LayerPrimer), so the forks need
// no fetch of it. The daemon's primer keeps the frozen copy the capture
// read as the layer (daemon.layers.CapturePrimed), which costs the
// capture nothing; the earlier primer, an image builder fed the capture's
// tar, slowed it (fork10 1.6-1.9x the snapshot's time primed against
// 1.1-1.2x unprimed, interleaved berth bench --snapshots runs, 2 cores).
var forkPrime = true

// forkParallel bounds the forks created at once (they share one layer, so
// only their starts compete). Ten rather than four: two interleaved pairs
// of berth bench --snapshots runs put the ten creates of fork10 at 1.14 s
// and 0.58 s with ten at once against 1.61 s and 2.45 s with four (load
// rising from 9 to 126 during the runs, so weak evidence).
var forkParallel = 10

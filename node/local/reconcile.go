package local

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// Reconcile makes the host match the store after a (re)start of the daemon,
// including one after kill -9. Containers that still run are adopted;
// sandboxes whose compute is gone become sleeping (their writable layer is
// on disk, so nothing a user wrote is lost); every leftover container,
// netns, veth, mount, cgroup and run dir that no record owns is removed;
// then alarms that fell due while the daemon was down fire.
func (m *Manager) Reconcile(ctx context.Context) error {
	recs, err := m.listOwned(ctx)
	if err != nil {
		return err
	}
	containers, err := m.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	live := map[string]Container{}
	for _, c := range containers {
		live[c.ID] = c
	}
	keep := map[string]bool{}  // ids whose compute stays up
	owned := map[string]bool{} // ids that have a record (their upper stays)
	for _, rec := range recs {
		owned[rec.ID] = true
		a, err := m.lock(ctx, rec.Name)
		if err != nil {
			return err
		}
		if m.adopt(ctx, a, live[rec.ID]) {
			keep[rec.ID] = true
		}
		a.mu.Unlock()
	}
	// Remove what no running sandbox owns. Each step is idempotent, so a
	// crash during reconcile is repaired by the next one.
	for _, c := range containers {
		if !keep[c.ID] {
			m.cfg.Meter.Repaired("orphan-container")
			_ = m.cfg.Runtime.Kill(ctx, c.ID, syscall.SIGKILL)
			if err := m.cfg.Runtime.Delete(ctx, c.ID, true); err != nil {
				m.cfg.Logf("reconcile: delete container %s: %v", c.ID, err)
			}
		}
	}
	if err := m.cfg.Network.Cleanup(ctx, keep); err != nil {
		m.cfg.Logf("reconcile: network cleanup: %v", err)
	}
	if mounted, err := m.cfg.Rootfs.Mounted(ctx); err == nil {
		for _, id := range mounted {
			if !keep[id] {
				m.cfg.Meter.Repaired("orphan-mount")
				if err := m.cfg.Rootfs.Unmount(ctx, id); err != nil {
					m.cfg.Logf("reconcile: unmount %s: %v", id, err)
				}
			}
		}
	}
	if known, err := m.cfg.Rootfs.Known(ctx); err == nil {
		for _, id := range known {
			if !owned[id] {
				m.cfg.Meter.Repaired("orphan-layer")
				if err := m.cfg.Rootfs.Remove(ctx, id); err != nil {
					m.cfg.Logf("reconcile: remove orphan layer %s: %v", id, err)
				}
			}
		}
	}
	if err := m.cfg.Runtime.CleanupCgroups(keep); err != nil {
		m.cfg.Logf("reconcile: cgroups: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(m.cfg.RunDir, "sandboxes")); err == nil {
		for _, e := range ents {
			if !keep[e.Name()] {
				d := filepath.Join(m.cfg.RunDir, "sandboxes", e.Name())
				if err := m.cfg.Runtime.ReleaseBundle(d); err != nil {
					m.cfg.Logf("reconcile: %v", err)
					continue
				}
				_ = os.RemoveAll(d)
			}
		}
	}
	m.collectOrphanBlobs(ctx)
	m.collectSnapshots(ctx)
	if m.objects != nil {
		// The controller objects' idle alarms are durable alarms: those
		// that fell due while the daemon was down fire on the object
		// host's first tick.
		return nil
	}
	m.fireDue(ctx, time.Now())
	return nil
}

// collectOrphanBlobs removes snapshot and backup blobs without a record: a
// crash between upload and record leaves one, and it must never become
// visible as a snapshot. Only safe at startup, before any upload runs.
func (m *Manager) collectOrphanBlobs(ctx context.Context) {
	if m.cfg.Blobs == nil || m.cfg.NodeName != "" {
		// In a cluster the blob store is shared and another node may be
		// between an upload and its record right now: an unrecorded blob
		// is not an orphan there (it stays until a cluster-wide sweep
		// that knows upload ages exists).
		return
	}
	known := map[string]bool{}
	live, err1 := m.st.ListSnapshots(ctx, "", "")
	expired, err2 := m.st.ExpiredSnapshots(ctx, time.Now())
	backups, err3 := m.st.ListBackups(ctx, "")
	if err1 != nil || err2 != nil || err3 != nil {
		return
	}
	for _, s := range append(live, expired...) {
		known[snapKey(s.ID)] = true
	}
	for _, b := range backups {
		known[backupKey(b.ID)] = true
	}
	for _, prefix := range []string{"snapshots/", "backups/"} {
		blobs, err := m.cfg.Blobs.List(ctx, prefix)
		if err != nil {
			m.cfg.Logf("reconcile: list blobs: %v", err)
			return
		}
		for _, b := range blobs {
			if !known[b.Key] {
				m.cfg.Logf("reconcile: removing unrecorded blob %s", b.Key)
				m.cfg.Meter.Repaired("orphan-blob")
				_ = m.cfg.Blobs.Delete(ctx, b.Key)
			}
		}
	}
}

// adopt decides the fate of one record found at startup and reports
// whether its container keeps running. Callers hold a.mu.
func (m *Manager) adopt(ctx context.Context, a *actor, c Container) bool {
	rec := &a.rec
	if rec.State == api.StateRunning || rec.State == api.StateStarting {
		if c.Status == "running" {
			ag := agentclient.New(filepath.Join(m.sandboxDir(rec.ID), "agent", wire.SocketName))
			hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, err := ag.Health(hctx)
			cancel()
			if err == nil && m.cfg.Egress != nil {
				ip, perr := netip.ParseAddr(rec.IP)
				if perr == nil {
					err = m.cfg.Egress.Attach(a.name, ip, policyOf(*rec))
				} else {
					err = fmt.Errorf("egress: no address recorded: %w", perr)
				}
			}
			if err == nil {
				a.agent = ag
				ectx, cancel := context.WithTimeout(ctx, 3*time.Second)
				if p, perr := ag.GetProcess(ectx, entrypointID); perr == nil && p.ExitCode == nil {
					// Its entrypoint still runs: signals reach it again,
					// and its end stops the container.
					a.entrypoint = true
					go m.watchEntrypoint(a.name, ag, rec.RunID)
				}
				cancel()
				if rec.State != api.StateRunning {
					rec.State = api.StateRunning
					_ = m.save(ctx, a)
				}
				m.journal(ctx, a.name, "adopt", rec.ID)
				go m.watchInit(a.name, rec.ID, filepath.Join(m.sandboxDir(rec.ID), "bundle"), rec.RunID)
				return true
			}
			ag.Close()
			m.cfg.Logf("reconcile: sandbox %s: agent unhealthy, restarting later: %v", a.name, err)
		}
	}
	if rec.State == api.StateSleeping && rec.SleepTier == api.SleepFreeze {
		return m.adoptFrozen(ctx, a, c)
	}
	if rec.State == api.StateSleeping {
		return false
	}
	// Its compute is gone or unusable: it sleeps until the next request.
	_ = m.stopCompute(ctx, a)
	prev := rec.State
	rec.State, rec.StartedAt, rec.IP = api.StateSleeping, time.Time{}, ""
	if prev == api.StateFailed {
		rec.State = api.StateFailed
	}
	if err := m.save(ctx, a); err != nil {
		m.cfg.Logf("reconcile: %v", err)
	}
	m.journal(ctx, a.name, "reconcile", "compute lost while "+prev)
	m.cfg.Meter.Repaired("compute-lost")
	return false
}

// fireDue puts to sleep the sandboxes whose persisted alarm is due. After a
// restart this is how alarms that fell due while the daemon was down fire.
func (m *Manager) fireDue(ctx context.Context, now time.Time) {
	if m.objects != nil {
		return // durable alarms (class.go) deliver them
	}
	due, err := m.st.DueAlarms(ctx, now)
	if err != nil {
		m.cfg.Logf("alarms: %v", err)
		return
	}
	due = m.owned(due)
	for _, rec := range due {
		m.maybeSleep(ctx, rec.Name, now)
	}
}

// maybeSleep sleeps the named sandbox if it is idle past its deadline. It
// re-checks under the actor lock, so a duplicate or stale alarm is harmless.
func (m *Manager) maybeSleep(ctx context.Context, name string, now time.Time) {
	a, err := m.lock(ctx, name)
	if err != nil {
		return
	}
	defer a.mu.Unlock()
	if !a.exists || a.rec.State != api.StateRunning || a.rec.KeepAlive || a.rec.SelfSleep {
		if !a.exists {
			m.drop(a)
		}
		return
	}
	a.actMu.Lock()
	idle := a.active == 0 && !now.Before(a.lastActive.Add(a.rec.SleepAfter))
	a.actMu.Unlock()
	if idle {
		if err := m.sleep(ctx, a, "idle for "+a.rec.SleepAfter.String()); err != nil {
			m.cfg.Logf("sandbox %s: sleep: %v", name, err)
		}
	}
}

// Run is the alarm loop. It sleeps idle sandboxes whose controller object
// does not (store.Sandbox.SelfSleep: the Sandbox class's own alarm does)
// and keeps each record's SleepAt within a second of the in-memory
// activity, until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.AlarmTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.tick(ctx, now)
			m.escalateFrozen(ctx, now)
		}
	}
}

func (m *Manager) tick(ctx context.Context, now time.Time) {
	m.mu.Lock()
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	var due []*actor // checkpoints (persist interval), taken off this loop
	for _, a := range actors {
		// Skip actors busy with a lifecycle operation; the next tick
		// sees them again.
		if !a.mu.TryLock() {
			continue
		}
		if a.deleted || !a.exists || a.rec.State != api.StateRunning {
			a.mu.Unlock()
			continue
		}
		a.actMu.Lock()
		deadline := a.lastActive.Add(a.rec.SleepAfter)
		idle := a.active == 0 && !now.Before(deadline)
		if a.active > 0 {
			deadline = now.Add(a.rec.SleepAfter)
		}
		drift := deadline.Sub(a.savedSleep)
		a.actMu.Unlock()
		switch {
		case idle && !a.rec.KeepAlive && !a.rec.SelfSleep:
			if err := m.sleep(ctx, a, "idle for "+a.rec.SleepAfter.String()); err != nil {
				m.cfg.Logf("sandbox %s: sleep: %v", a.name, err)
			}
		case !a.rec.KeepAlive && (drift > time.Second || drift < -time.Second):
			// Persist the moved alarm so that it survives a crash.
			if err := m.save(ctx, a); err != nil {
				m.cfg.Logf("sandbox %s: %v", a.name, err)
			}
		}
		if checkpointDue(a.rec, now) {
			due = append(due, a)
		}
		a.mu.Unlock()
	}
	for _, a := range due {
		// An upload takes a while; it must not hold up the idle checks
		// of every other sandbox. checkpoint takes the actor's lock
		// itself, so one runs per sandbox at a time.
		go m.checkpoint(ctx, a, now)
	}
	m.fireDue(ctx, now)
}

// adoptFrozen keeps a sandbox frozen across a daemon restart: its
// container still holds its processes, frozen, so it stays sleeping in the
// freeze tier (its agent connection is made again at the thaw). A frozen
// sandbox whose container is gone sleeps with its files. Callers hold a.mu.
func (m *Manager) adoptFrozen(ctx context.Context, a *actor, c Container) bool {
	rec := &a.rec
	err := fmt.Errorf("its container is %q", c.Status)
	if c.Status == "paused" || c.Status == "running" {
		err = nil
		if fz, ok := m.cfg.Runtime.(Freezer); ok && c.Status == "running" {
			// Thawed behind berth's back: frozen again, as recorded.
			fctx, cancel := context.WithTimeout(ctx, freezeTimeout)
			err = fz.Freeze(fctx, rec.ID)
			cancel()
		}
		if err == nil && m.cfg.Egress != nil {
			ip, perr := netip.ParseAddr(rec.IP)
			if perr != nil {
				err = fmt.Errorf("egress: no address recorded: %w", perr)
			} else {
				err = m.cfg.Egress.Attach(a.name, ip, policyOf(*rec))
			}
		}
	}
	if err == nil {
		m.journal(ctx, a.name, "adopt", rec.ID+" (frozen)")
		go m.watchInit(a.name, rec.ID, filepath.Join(m.sandboxDir(rec.ID), "bundle"), rec.RunID)
		return true
	}
	_ = m.stopCompute(ctx, a)
	rec.SleepTier, rec.FrozenAt, rec.StartedAt, rec.IP = api.SleepStop, time.Time{}, time.Time{}, ""
	if serr := m.save(ctx, a); serr != nil {
		m.cfg.Logf("reconcile: %v", serr)
	}
	m.journal(ctx, a.name, "reconcile", "frozen compute lost ("+err.Error()+"): sleeps with its files")
	m.cfg.Meter.Repaired("compute-lost")
	return false
}

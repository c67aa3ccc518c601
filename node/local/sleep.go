package local

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Sleep tiers. A sandbox sleeps in the tier its sleep mode names
// (store.Sandbox.Sleep): freeze keeps its container, network, mounts and
// memory and freezes its cgroup; checkpoint writes its processes to disk
// (the Checkpointer, none yet); stop keeps its files only. The API state
// is "sleeping" in each; SleepTier says which. A frozen sandbox escalates
// (escalateFrozen) after Config.FreezeMax, or oldest first when the frozen
// sandboxes hold more than Config.FreezeMemoryBytes.

// Freezer freezes and thaws every process of a container without
// removing it (runtime.Selector: the cgroup freezer, v1 or v2).
type Freezer interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
}

// MemoryMeter is the optional part of a Runtime that reads the memory a
// container's cgroup holds; without it a frozen sandbox counts at its
// memory limit.
type MemoryMeter interface {
	MemoryUsage(id string) (int64, error)
}

// Checkpointer is the checkpoint tier (CRIU). The node has none today;
// a sleep or escalation to checkpoint then falls to stop and says why.
type Checkpointer interface {
	// CanCheckpoint reports why a sandbox of this isolation cannot be
	// checkpointed here (nil: it can).
	CanCheckpoint(isolation string) error
}

// freezeTimeout bounds a freeze or a thaw and the agent check after it.
const freezeTimeout = 5 * time.Second

// sleepMode resolves a create's sleep mode against the node's default
// and what the node can do.
func (m *Manager) sleepMode(req, isolation string) (string, error) {
	if err := api.ValidSleepMode(req); err != nil {
		return "", err
	}
	mode := req
	if mode == "" {
		mode = m.cfg.DefaultSleep
	}
	if mode == "" {
		mode = api.SleepStop
	}
	if mode == api.SleepCheckpoint {
		if err := m.canCheckpoint(isolation); err != nil {
			if req == "" {
				// The operator's default: a sandbox this node cannot
				// checkpoint freezes first instead.
				return api.SleepFreeze, nil
			}
			return "", errdefs.FailedPrecondition("sleep %q is not available: %v", api.SleepCheckpoint, err)
		}
	}
	return mode, nil
}

func (m *Manager) canCheckpoint(isolation string) error {
	if m.cfg.Checkpointer == nil {
		return fmt.Errorf("this node cannot checkpoint sandboxes (no checkpoint support; use %q or %q)", api.SleepFreeze, api.SleepStop)
	}
	return m.cfg.Checkpointer.CanCheckpoint(isolation)
}

// sleepModeOf is a record's sleep mode; records from before tiers stop.
func sleepModeOf(mode string) string {
	if mode == "" {
		return api.SleepStop
	}
	return mode
}

// sleep puts a to sleep in the tier of its sleep mode, falling to the
// next tier when one cannot be had (the journal says why). Callers hold
// a.mu.
func (m *Manager) sleep(ctx context.Context, a *actor, reason string) error {
	if a.rec.State == api.StateSleeping {
		return nil
	}
	switch sleepModeOf(a.rec.Sleep) {
	case api.SleepFreeze:
		err := m.freeze(ctx, a, reason)
		if err == nil {
			return nil
		}
		m.cfg.Logf("sandbox %s: freeze: %v", a.name, err)
		m.journal(ctx, a.name, "freeze-failed", err.Error()+"; stops instead")
		reason += " (freeze failed: stopped)"
	case api.SleepCheckpoint:
		reason += " (" + m.checkpointFallback(ctx, a) + ")"
	}
	return m.sleepStop(ctx, a, reason)
}

// checkpointFallback journals why a checkpoint falls to stop and returns
// the note for the sleep's journal entry.
func (m *Manager) checkpointFallback(ctx context.Context, a *actor) string {
	why := "checkpoint tier not wired on this node"
	if err := m.canCheckpoint(isolationOf(a.rec)); err != nil {
		why = err.Error()
	}
	m.journal(ctx, a.name, "checkpoint-unavailable", why+"; stops instead")
	return "checkpoint unavailable: stopped"
}

// sleepStop stops a's compute and marks it sleeping; its files stay on
// local disk in the writable layer. Callers hold a.mu.
func (m *Manager) sleepStop(ctx context.Context, a *actor, reason string) error {
	if err := m.stopCompute(ctx, a); err != nil {
		return err
	}
	a.rec.State, a.rec.StartedAt, a.rec.IP = api.StateSleeping, time.Time{}, ""
	a.rec.SleepTier, a.rec.FrozenAt = api.SleepStop, time.Time{}
	if err := m.persist(ctx, a); err != nil {
		// The files are safe on local disk; only the off-host copy failed.
		m.cfg.Logf("sandbox %s: persist to blob store: %v", a.name, err)
		m.journal(ctx, a.name, "persist-failed", err.Error())
	}
	if err := m.save(ctx, a); err != nil {
		return err
	}
	m.journal(ctx, a.name, "sleep", reason)
	return nil
}

// freeze freezes a's cgroup: everything else of its run stays (container,
// network, mounts, egress attachment, the agent's connection). Callers
// hold a.mu.
func (m *Manager) freeze(ctx context.Context, a *actor, reason string) error {
	fz, ok := m.cfg.Runtime.(Freezer)
	if !ok {
		return errdefs.FailedPrecondition("this node's runtime cannot freeze containers")
	}
	if m.cfg.Previews != nil {
		// Open preview connections would hang on a frozen server.
		m.cfg.Previews.Revoke(a.name, 0)
	}
	t0 := time.Now()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), freezeTimeout)
	defer cancel()
	if err := fz.Freeze(fctx, a.rec.ID); err != nil {
		_ = fz.Thaw(fctx, a.rec.ID) // a half-done freeze must not leave it stuck
		return err
	}
	took := time.Since(t0)
	a.rec.State, a.rec.SleepTier, a.rec.FrozenAt = api.StateSleeping, api.SleepFreeze, time.Now().UTC()
	if err := m.save(ctx, a); err != nil {
		_ = fz.Thaw(fctx, a.rec.ID)
		a.rec.State, a.rec.SleepTier, a.rec.FrozenAt = api.StateRunning, "", time.Time{}
		return err
	}
	m.journal(ctx, a.name, "sleep", fmt.Sprintf("%s (freeze in %.1f ms)", reason, float64(took.Microseconds())/1000))
	return nil
}

// thaw wakes a frozen a: thaw its cgroup, then check that its agent
// answers. On an error the caller boots it from its files. Callers hold
// a.mu.
func (m *Manager) thaw(ctx context.Context, a *actor) error {
	fz, ok := m.cfg.Runtime.(Freezer)
	if !ok {
		return errdefs.FailedPrecondition("this node's runtime cannot thaw containers")
	}
	t0 := time.Now()
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), freezeTimeout)
	defer cancel()
	if err := fz.Thaw(tctx, a.rec.ID); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	thawed := time.Since(t0)
	if a.agent == nil { // adopted frozen after a daemon restart
		a.agent = agentclient.New(filepath.Join(m.sandboxDir(a.rec.ID), "agent", wire.SocketName))
	}
	if _, err := a.agent.Health(tctx); err != nil {
		return fmt.Errorf("agent did not answer after the thaw: %w", err)
	}
	a.rec.State, a.rec.SleepTier, a.rec.FrozenAt, a.rec.LastWake = api.StateRunning, "", time.Time{}, "thaw"
	m.touch(a)
	if err := m.save(ctx, a); err != nil {
		return err
	}
	m.journal(ctx, a.name, "wake", fmt.Sprintf("thaw in %.1f ms (agent checked in %.1f ms)",
		float64(thawed.Microseconds())/1000, float64(time.Since(t0).Microseconds())/1000))
	return nil
}

// wakeFrozen is the start of a frozen a: a thaw, or when that fails the
// compute's removal so that start boots it from its files (reboot, said
// in LastWake and the journal). done reports whether the thaw woke it.
func (m *Manager) wakeFrozen(ctx context.Context, a *actor) (done bool) {
	t0 := time.Now()
	err := m.thaw(ctx, a)
	if err == nil {
		m.cfg.Meter.StartDone("wake", time.Since(t0))
		return true
	}
	m.cfg.Logf("sandbox %s: %v; booting it from its files", a.name, err)
	m.journal(ctx, a.name, "reboot", err.Error()+"; boots from its files")
	if cerr := m.stopCompute(context.WithoutCancel(ctx), a); cerr != nil {
		m.cfg.Logf("sandbox %s: remove frozen compute: %v", a.name, cerr)
	}
	a.rec.SleepTier, a.rec.FrozenAt, a.rec.LastWake = api.SleepStop, time.Time{}, "reboot: "+err.Error()
	return false
}

// frozenInfo is one frozen sandbox as escalation sees it.
type frozenInfo struct {
	name     string
	frozenAt time.Time
	bytes    int64
}

// escalation is one frozen sandbox to move down a tier, and why.
type escalation struct {
	name, reason string
}

// pickEscalations chooses the frozen sandboxes to escalate at now: every
// one frozen for max or longer (max > 0), then, oldest frozen first, as
// many as it takes to bring the rest within budget bytes (budget > 0).
func pickEscalations(frozen []frozenInfo, now time.Time, max time.Duration, budget int64) []escalation {
	fs := append([]frozenInfo(nil), frozen...)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].frozenAt.Before(fs[j].frozenAt) })
	var out []escalation
	var total int64
	for _, f := range fs {
		total += f.bytes
	}
	for _, f := range fs {
		switch {
		case max > 0 && now.Sub(f.frozenAt) >= max:
			out = append(out, escalation{f.name, fmt.Sprintf("frozen for %s (freeze max %s)", now.Sub(f.frozenAt).Round(time.Second), max)})
		case budget > 0 && total > budget:
			out = append(out, escalation{f.name, fmt.Sprintf("frozen sandboxes hold %d MiB, over the freeze memory budget of %d MiB (oldest frozen first)", total>>20, budget>>20)})
		default:
			continue
		}
		total -= f.bytes
	}
	return out
}

// escalateFrozen moves frozen sandboxes down a tier when they were frozen
// too long or hold too much memory together (pickEscalations).
func (m *Manager) escalateFrozen(ctx context.Context, now time.Time) {
	if m.cfg.FreezeMax <= 0 && m.cfg.FreezeMemoryBytes <= 0 {
		return
	}
	m.mu.Lock()
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	meter, _ := m.cfg.Runtime.(MemoryMeter)
	var frozen []frozenInfo
	for _, a := range actors {
		if !a.mu.TryLock() {
			continue // busy: the next tick sees it again
		}
		if !a.deleted && a.exists && a.rec.State == api.StateSleeping && a.rec.SleepTier == api.SleepFreeze {
			f := frozenInfo{name: a.name, frozenAt: a.rec.FrozenAt, bytes: a.rec.Resources.MemoryMiB << 20}
			if meter != nil {
				if b, err := meter.MemoryUsage(a.rec.ID); err == nil {
					f.bytes = b
				}
			}
			frozen = append(frozen, f)
		}
		a.mu.Unlock()
	}
	for _, e := range pickEscalations(frozen, now, m.cfg.FreezeMax, m.cfg.FreezeMemoryBytes) {
		if err := m.escalate(ctx, e.name, e.reason); err != nil {
			m.cfg.Logf("sandbox %s: escalate from freeze: %v", e.name, err)
		}
	}
}

// escalate moves the named frozen sandbox to checkpoint (when this node
// can) or stop, journaling why.
func (m *Manager) escalate(ctx context.Context, name, reason string) error {
	a, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return nil
	}
	if a.rec.State != api.StateSleeping || a.rec.SleepTier != api.SleepFreeze {
		return nil // woken or escalated meanwhile
	}
	note := m.checkpointFallback(ctx, a)
	m.journal(ctx, name, "escalate", reason+": "+note)
	return m.sleepStop(ctx, a, "escalated from freeze: "+reason)
}

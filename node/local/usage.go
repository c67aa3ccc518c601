package local

import (
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/metering"
)

// Running lists the sandboxes running on this node for the usage sampler
// (metering.Source). An actor busy with a lifecycle operation is skipped
// this round; its counters are cumulative, so the next round catches up.
func (m *Manager) Running() []metering.Target {
	m.mu.Lock()
	actors := make([]*actor, 0, len(m.actors))
	for _, a := range m.actors {
		actors = append(actors, a)
	}
	m.mu.Unlock()
	out := make([]metering.Target, 0, len(actors))
	for _, a := range actors {
		if !a.mu.TryLock() {
			continue
		}
		r := a.rec
		ok := a.exists && !a.deleted && r.State == api.StateRunning && r.SleepTier == "" && m.mine(r)
		a.mu.Unlock()
		if !ok {
			continue
		}
		out = append(out, metering.Target{
			Name: r.Name, Tenant: r.Tenant, ID: r.ID, RunID: r.RunID, StartedAt: r.StartedAt,
			CPUs: r.Resources.VCPU, MemoryLimit: r.Resources.MemoryMiB << 20, DiskQuota: r.Resources.DiskMB * 1000 * 1000,
			Traffic: r.Labels[api.LabelTrafficActivity] == "true",
		})
	}
	return out
}

// StartQueue is how many starts wait at the admission gate now.
func (m *Manager) StartQueue() int { return m.gate.queueDepth() }

// NoteTraffic records that name's own network traffic moved, as activity
// for idle sleep (api.LabelTrafficActivity; the sampler calls it only for
// sandboxes with the label).
func (m *Manager) NoteTraffic(name string) {
	m.mu.Lock()
	a := m.actors[name]
	m.mu.Unlock()
	if a != nil {
		m.touch(a)
	}
}

package local

import (
	"context"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
)

// The node's inventory: sandbox records rendered as the public view.
// Listing them (by state and label) is the control plane's
// (control.Plane.List).

// view renders a's record, with the live idle deadline. Callers hold a.mu.
func (m *Manager) view(a *actor) api.Sandbox {
	s := toAPI(a.rec)
	// OOM kills inside a running sandbox are read live from its cgroup
	// (memory.events or memory.oom_control); the record keeps the flag
	// once the container is gone.
	if a.rec.State == api.StateRunning && m.cfg.Runtime.OOMKilled(a.rec.ID) {
		s.OOMKilled = true
	}
	a.actMu.Lock()
	s.LastActive = a.lastActive
	if a.rec.State == api.StateRunning && !a.rec.KeepAlive {
		at := a.lastActive.Add(a.rec.SleepAfter)
		s.SleepAt = &at
	}
	a.actMu.Unlock()
	return s
}

// toAPI is the record's public view (store.Sandbox.View).
func toAPI(r store.Sandbox) api.Sandbox { return r.View() }

// ImageInUse reports whether any sandbox records digest, so the image
// store can refuse to delete an image that a sandbox still needs.
func (m *Manager) ImageInUse(digest string) bool {
	if m.pools.usesImage(digest) { // a warm pool member runs on it
		return true
	}
	recs, err := m.listOwned(context.Background()) // images are per node
	if err != nil {
		return true // when in doubt, keep the image
	}
	for _, r := range recs {
		if r.ImageDigest == digest {
			return true
		}
	}
	return false
}

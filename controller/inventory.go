package controller

import (
	"context"
	"sort"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/server"
	"github.com/berth-sh/berth/store"
)

// The compute's inventory: sandbox records listed by state and label,
// rendered as the public view.

// List implements server.Sandboxes.
func (m *Manager) List(ctx context.Context, f server.ListFilter) ([]api.Sandbox, error) {
	recs, err := m.st.List(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.Sandbox{}
	tenant := policy.TenantFrom(ctx)
	for _, rec := range recs {
		if tenant != "" && rec.Tenant != tenant {
			continue
		}
		if f.State != "" && rec.State != f.State {
			continue
		}
		match := true
		for k, v := range f.Labels {
			if rec.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, toAPI(rec))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

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

func toAPI(r store.Sandbox) api.Sandbox {
	s := api.Sandbox{
		Name: r.Name, ID: r.ID, State: r.State, Image: r.Image, ImageDigest: r.ImageDigest,
		Instance: r.Instance, Resources: r.Resources, Internet: r.Internet, Env: r.Env,
		Labels: r.Labels, SleepAfter: r.SleepAfter.String(), KeepAlive: r.KeepAlive, IP: r.IP,
		CreatedAt: r.CreatedAt, LastActive: r.LastActive, Error: r.Error, OOMKilled: r.OOMKilled,
		Snapshot: r.Snapshot, Persist: r.Persist, Isolation: r.Isolation,
	}
	if s.Isolation == "" {
		s.Isolation = api.IsolationRunc
	}
	p := policyOf(r)
	p.Allow, p.Deny, p.Inject = nonNil(p.Allow), nonNil(p.Deny), nonNil(p.Inject)
	s.Network = &p
	if !r.StartedAt.IsZero() {
		t := r.StartedAt
		s.StartedAt = &t
	}
	if !r.SleepAt.IsZero() {
		t := r.SleepAt
		s.SleepAt = &t
	}
	return s
}

// ImageInUse reports whether any sandbox records digest, so the image
// store can refuse to delete an image that a sandbox still needs.
func (m *Manager) ImageInUse(digest string) bool {
	recs, err := m.st.List(context.Background())
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

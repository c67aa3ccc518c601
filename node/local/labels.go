package local

import (
	"context"
	"maps"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// WriteLabels changes a sandbox's labels without waking it: each key in
// set is written, and a key whose value is empty is removed. Faces built
// on the control plane (the E2B API) keep their per-sandbox state here,
// so it is persisted with the record and survives restarts. The control
// plane's SetLabels (control.Plane) then has the sandbox's controller
// object record the new spec.
func (m *Manager) WriteLabels(ctx context.Context, name string, set map[string]string) (api.Sandbox, error) {
	return m.setLabels(ctx, name, set)
}

func (m *Manager) setLabels(ctx context.Context, name string, set map[string]string) (api.Sandbox, error) {
	if err := ValidName(name); err != nil {
		return api.Sandbox{}, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	labels := maps.Clone(a.rec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range set {
		if v == "" {
			delete(labels, k)
		} else {
			labels[k] = v
		}
	}
	old := a.rec.Labels
	a.rec.Labels = labels
	if err := m.save(ctx, a); err != nil {
		a.rec.Labels = old
		return api.Sandbox{}, err
	}
	return m.view(a), nil
}

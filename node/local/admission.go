package local

import (
	"context"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/tenant"
	"github.com/berth-sh/berth/store"
)

// Policy is the operator policy as the node asks it: before every start
// (Admit), when a sandbox's egress policy changes (CheckNetwork), and for
// the image names the node reports (ImageDigests). *policy.Policy is one;
// the daemon wires it in. This package does not import package policy,
// which is the control plane's.
type Policy interface {
	// Admit checks one start; its errors are errdefs permission denied
	// or resource exhausted.
	Admit(ctx context.Context, r tenant.Request) error
	// CheckNetwork checks an egress policy a tenant's sandbox asks for:
	// its internet access and the hosts its rules name.
	CheckNetwork(tenantName string, internet bool, rules []string) error
	// ImageDigests maps the operator's image names to pinned digests;
	// empty: the policy names no images (any image is allowed).
	ImageDigests() map[string]string
}

// mayUse reports whether the caller's tenant may use an artifact owned by
// owner. The operator's key (no tenant) may use every one.
func mayUse(ctx context.Context, owner string) bool {
	t := tenant.From(ctx)
	return t == "" || t == owner
}

// admit checks a start of rec against the operator policy and, if it
// passes, reserves its resources until release is called (after the
// start), so that concurrent starts by one tenant cannot overshoot a quota
// between the check and the record turning running. Callers hold a.mu.
func (m *Manager) admit(ctx context.Context, rec *store.Sandbox) (release func(), err error) {
	p := m.cfg.Policy
	if p == nil {
		return func() {}, nil
	}
	digest := rec.ImageDigest
	if digest == "" {
		img, err := m.prepare(ctx, rec.Image)
		if err != nil {
			return nil, err
		}
		digest = img.Digest
	}
	m.admitMu.Lock()
	defer m.admitMu.Unlock()
	recs, err := m.st.List(ctx)
	if err != nil {
		return nil, err
	}
	var u tenant.Usage
	for _, r := range recs {
		if r.Name == rec.Name || r.Tenant != rec.Tenant || m.reserved[r.Name] != nil {
			continue
		}
		if r.State == api.StateRunning || r.State == api.StateStarting {
			u.Sandboxes++
			u.VCPU += r.Resources.VCPU
			u.MemoryMiB += r.Resources.MemoryMiB
		}
	}
	for name, r := range m.reserved {
		if name != rec.Name && r.Tenant == rec.Tenant {
			u.Sandboxes++
			u.VCPU += r.Resources.VCPU
			u.MemoryMiB += r.Resources.MemoryMiB
		}
	}
	err = p.Admit(ctx, tenant.Request{
		Tenant: rec.Tenant, Sandbox: rec.Name, Image: rec.Image, Digest: digest, Snapshot: rec.Snapshot,
		Instance: rec.Instance, VCPU: rec.Resources.VCPU, MemoryMiB: rec.Resources.MemoryMiB, DiskMB: rec.Resources.DiskMB,
		Internet: rec.Internet, EgressRules: egressRules(rec.Network), Usage: u,
	})
	if err != nil {
		return nil, err
	}
	if m.reserved == nil {
		m.reserved = map[string]*store.Sandbox{}
	}
	cp := *rec
	m.reserved[rec.Name] = &cp
	return func() {
		m.admitMu.Lock()
		delete(m.reserved, cp.Name)
		m.admitMu.Unlock()
	}, nil
}

// egressRules lists what a network policy opens, for the operator policy's
// check: its allow entries and inject hosts.
func egressRules(p *api.NetworkPolicy) []string {
	if p == nil {
		return nil
	}
	out := append([]string(nil), p.Allow...)
	for _, r := range p.Inject {
		out = append(out, r.Host)
	}
	return out
}

package local

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/tenant"
	"github.com/berth-sh/berth/store"
)

// Egress enforces sandboxes' network policies on the host (egress.Manager).
type Egress interface {
	// InstallCA puts the egress CA into a sandbox's root filesystem.
	InstallCA(rootfs string) error
	Attach(name string, ip netip.Addr, p api.NetworkPolicy) error
	SetPolicy(name string, p api.NetworkPolicy) error
	Detach(name string)
	Forget(name string)
	Log(name string, limit int) []api.EgressEvent
}

// maxSecretBytes bounds one secret value.
const maxSecretBytes = 64 << 10

// policyOf is a record's egress policy (records from before policies
// existed have only the internet flag).
func policyOf(rec store.Sandbox) api.NetworkPolicy {
	if rec.Network != nil {
		return *rec.Network
	}
	return api.NetworkPolicy{Internet: rec.Internet}
}

// rawInternet is what the network layer's internet switch must say for a
// policy: with the egress proxy every TCP connection is checked there, and
// other traffic is forwarded only when the policy lets everything out.
func (m *Manager) rawInternet(p api.NetworkPolicy) bool {
	if m.cfg.Egress == nil {
		return p.Internet
	}
	c, err := egress.Compile(p)
	return err == nil && c.RawForwarding()
}

// GetNetwork returns a sandbox's egress policy.
func (m *Manager) GetNetwork(ctx context.Context, name string) (api.NetworkPolicy, error) {
	sb, err := m.describe(ctx, name)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	return *sb.Network, nil
}

// SetNetwork replaces a sandbox's egress policy. A running sandbox gets it
// at once, without a restart; connections it still allows stay open.
func (m *Manager) SetNetwork(ctx context.Context, name string, p api.NetworkPolicy) (api.NetworkPolicy, error) {
	out, err := m.setNetwork(ctx, name, p)
	if err == nil {
		m.refreshSpec(ctx, name)
	}
	return out, err
}

func (m *Manager) setNetwork(ctx context.Context, name string, p api.NetworkPolicy) (api.NetworkPolicy, error) {
	if err := ValidName(name); err != nil {
		return api.NetworkPolicy{}, err
	}
	if _, err := egress.Compile(p); err != nil {
		return api.NetworkPolicy{}, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return api.NetworkPolicy{}, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return api.NetworkPolicy{}, errdefs.NotFound("sandbox %q not found", name)
	}
	if err := m.setNetworkLocked(ctx, a, p); err != nil {
		return api.NetworkPolicy{}, err
	}
	return policyOf(a.rec), nil
}

func (m *Manager) setNetworkLocked(ctx context.Context, a *actor, p api.NetworkPolicy) error {
	p.Allow, p.Deny, p.Inject = nonNil(p.Allow), nonNil(p.Deny), nonNil(p.Inject)
	if pol := m.cfg.Policy; pol != nil {
		if err := pol.CheckNetwork(a.rec.Tenant, p.Internet, egressRules(&p)); err != nil {
			return err
		}
	}
	a.rec.Network, a.rec.Internet = &p, p.Internet
	if err := m.save(ctx, a); err != nil {
		return err
	}
	if a.rec.State == api.StateRunning {
		if m.cfg.Egress != nil {
			if err := m.cfg.Egress.SetPolicy(a.name, p); err != nil {
				return err
			}
		}
		if n, ok := m.cfg.Network.(interface {
			SetInternet(ctx context.Context, id string, on bool) error
		}); ok {
			if err := n.SetInternet(ctx, a.rec.ID, m.rawInternet(p)); err != nil {
				return fmt.Errorf("network: %w", err)
			}
		}
	}
	m.journal(ctx, a.name, "network", fmt.Sprintf("internet=%v allow=%d deny=%d inject=%d", p.Internet, len(p.Allow), len(p.Deny), len(p.Inject)))
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// EgressLog returns a sandbox's most recent egress decisions.
func (m *Manager) EgressLog(ctx context.Context, name string, limit int) ([]api.EgressEvent, error) {
	if _, err := m.describe(ctx, name); err != nil {
		return nil, err
	}
	if m.cfg.Egress == nil {
		return []api.EgressEvent{}, nil
	}
	return m.cfg.Egress.Log(name, limit), nil
}

func (m *Manager) secrets() (store.Secrets, error) {
	s, ok := m.st.(store.Secrets)
	if !ok {
		return nil, errdefs.FailedPrecondition("this state store keeps no secrets")
	}
	return s, nil
}

// SetSecret stores a secret for credential injection. It is write-only.
func (m *Manager) SetSecret(ctx context.Context, name, value string) error {
	if err := operatorOnly(ctx); err != nil {
		return err
	}
	if err := egress.ValidSecretName(name); err != nil {
		return err
	}
	if value == "" || len(value) > maxSecretBytes {
		return errdefs.InvalidArgument("secret value must be 1-%d bytes", maxSecretBytes)
	}
	s, err := m.secrets()
	if err != nil {
		return err
	}
	return s.PutSecret(ctx, name, value)
}

// ListSecrets lists secret names, never values.
func (m *Manager) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	if err := operatorOnly(ctx); err != nil {
		return nil, err
	}
	s, err := m.secrets()
	if err != nil {
		return nil, err
	}
	list, err := s.ListSecrets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Secret, 0, len(list))
	for _, i := range list {
		out = append(out, api.Secret{Name: i.Name, UpdatedAt: i.UpdatedAt})
	}
	return out, nil
}

// DeleteSecret removes a secret; injection rules naming it then refuse
// their requests.
func (m *Manager) DeleteSecret(ctx context.Context, name string) error {
	if err := operatorOnly(ctx); err != nil {
		return err
	}
	if err := egress.ValidSecretName(name); err != nil {
		return err
	}
	s, err := m.secrets()
	if err != nil {
		return err
	}
	return s.DeleteSecret(ctx, name)
}

// Secret reads a secret for the egress proxy (host side only).
func (m *Manager) Secret(ctx context.Context, name string) (string, bool, error) {
	s, err := m.secrets()
	if err != nil {
		return "", false, err
	}
	v, err := s.GetSecret(ctx, name)
	if errdefs.IsKind(err, errdefs.ErrNotFound) {
		return "", false, nil
	}
	return v, err == nil, err
}

// operatorOnly refuses secret management to tenant keys. Secrets are the
// deployment's: one tenant must not read the names of, overwrite or delete
// what another's inject rules use. Tenants name secrets in inject rules,
// and the operator policy bounds the hosts those rules may reach.
func operatorOnly(ctx context.Context) error {
	if t := tenant.From(ctx); t != "" {
		return errdefs.PermissionDenied("secrets are managed with the operator's API key; tenant %s can only name them in inject rules", t)
	}
	return nil
}

package policy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/tenant"
)

// Policy is a parsed, valid policy file.
type Policy struct {
	// Images maps allowed image names to their digests. Empty: any image.
	Images map[string]string
	// Default applies to callers that match no tenant (the daemon's own
	// API key among them). Nil: no per-tenant limits for them.
	Default *Tenant
	Tenants []*Tenant
}

// Tenant is what one API key (or group of keys) may do.
type Tenant struct {
	Name string
	// keyHashes are sha256 of the tenant's API keys.
	keyHashes [][32]byte
	// InstanceTypes allowed; empty: all named types.
	InstanceTypes []string
	// Custom bounds custom sizes; nil: custom sizes are refused.
	Custom *Bounds
	// Quotas over the tenant's running sandboxes; 0: unlimited.
	MaxSandboxes int
	MaxVCPU      float64
	MaxMemoryMiB int64
	// Internet allows sandboxes with internet access.
	Internet bool
	// EgressRules are the egress rules the tenant's sandboxes may name:
	// the exact host patterns, IPs or CIDRs of their allow entries and
	// inject hosts (deny entries only restrict, and are always allowed).
	EgressRules []string
	// NodeLabels confines the tenant's sandboxes to some nodes of a
	// cluster: for every key, a node's label must have one of the listed
	// values (nodeLabels: {pool: [shared, team-a]}). Nil: any node.
	// Placement enforces it (control/placement, Request.TenantNodes).
	NodeLabels map[string][]string
}

// Bounds limit a custom size.
type Bounds struct {
	MaxVCPU      float64
	MaxMemoryMiB int64
	MaxDiskMB    int64
}

// Usage is what a tenant runs now, besides the sandbox being admitted
// (package internal/tenant's, which the node fills in).
type Usage = tenant.Usage

// Request is one start to admit (package internal/tenant's, which the
// node fills in).
type Request = tenant.Request

// TenantForKey returns the tenant an API key belongs to.
func (p *Policy) TenantForKey(key string) (*Tenant, bool) {
	h := sha256.Sum256([]byte(key))
	for _, t := range p.Tenants {
		for _, k := range t.keyHashes {
			if subtle.ConstantTimeCompare(h[:], k[:]) == 1 {
				return t, true
			}
		}
	}
	return nil, false
}

func (p *Policy) tenant(name string) *Tenant {
	for _, t := range p.Tenants {
		if t.Name == name {
			return t
		}
	}
	return p.Default
}

// ImageDigests is a copy of the allowlist: image names to their pinned
// digests; empty when any image is allowed (or p is nil).
func (p *Policy) ImageDigests() map[string]string {
	if p == nil || len(p.Images) == 0 {
		return nil
	}
	out := make(map[string]string, len(p.Images))
	for n, d := range p.Images {
		out[n] = d
	}
	return out
}

// ImageAllowed reports whether digest is on the allowlist.
func (p *Policy) ImageAllowed(digest string) bool {
	if len(p.Images) == 0 {
		return true
	}
	for _, d := range p.Images {
		if d == digest {
			return true
		}
	}
	return false
}

// NodeLabels returns the node labels the tenant's sandboxes are confined
// to (Tenant.NodeLabels of the tenant, or of the default section for
// callers without one); nil when the policy puts no bound on nodes.
func (p *Policy) NodeLabels(tenant string) map[string][]string {
	if p == nil {
		return nil
	}
	if t := p.tenant(tenant); t != nil {
		return t.NodeLabels
	}
	return nil
}

// CheckNetwork checks an egress policy that a tenant's sandbox asks for,
// at start (Admit does it too) or when it changes while running: internet
// access, and every allow or inject host it names (rules) must be allowed.
func (p *Policy) CheckNetwork(tenant string, internet bool, rules []string) error {
	if p == nil {
		return nil
	}
	if t := p.tenant(tenant); t != nil {
		return t.checkNetwork(internet, rules)
	}
	return nil
}

func (t *Tenant) checkNetwork(internet bool, rules []string) error {
	who := "tenant " + t.Name
	if internet && !t.Internet {
		return errdefs.PermissionDenied("%s may not start sandboxes with internet access", who)
	}
	for _, e := range rules {
		if !slices.Contains(t.EgressRules, e) {
			return errdefs.PermissionDenied("%s may not use egress rule %q (allowed: %s)", who, e, strings.Join(t.EgressRules, ", "))
		}
	}
	return nil
}

// Admit checks one start against the policy.
func (p *Policy) Admit(ctx context.Context, r Request) error {
	if p == nil {
		return nil
	}
	if !p.ImageAllowed(r.Digest) {
		if r.Snapshot != "" {
			return errdefs.PermissionDenied("snapshot %s is based on image %s, which is not in the operator's image allowlist", r.Snapshot, r.Digest)
		}
		return errdefs.PermissionDenied("image %q (%s) is not in the operator's image allowlist (allowed: %s)", r.Image, r.Digest, strings.Join(p.imageNames(), ", "))
	}
	t := p.tenant(r.Tenant)
	if t == nil {
		return nil
	}
	who := "tenant " + t.Name
	if r.Instance == "custom" {
		b := t.Custom
		switch {
		case b == nil:
			return errdefs.PermissionDenied("%s may not use custom sizes (allowed instance types: %s)", who, strings.Join(t.InstanceTypes, ", "))
		case b.MaxVCPU > 0 && r.VCPU > b.MaxVCPU:
			return errdefs.PermissionDenied("%s: custom vcpu %v is above its bound %v", who, r.VCPU, b.MaxVCPU)
		case b.MaxMemoryMiB > 0 && r.MemoryMiB > b.MaxMemoryMiB:
			return errdefs.PermissionDenied("%s: custom memoryMib %d is above its bound %d", who, r.MemoryMiB, b.MaxMemoryMiB)
		case b.MaxDiskMB > 0 && r.DiskMB > b.MaxDiskMB:
			return errdefs.PermissionDenied("%s: custom diskMb %d is above its bound %d", who, r.DiskMB, b.MaxDiskMB)
		}
	} else if len(t.InstanceTypes) > 0 && !slices.Contains(t.InstanceTypes, r.Instance) {
		return errdefs.PermissionDenied("%s may not use instance type %q (allowed: %s)", who, r.Instance, strings.Join(t.InstanceTypes, ", "))
	}
	if err := t.checkNetwork(r.Internet, r.EgressRules); err != nil {
		return err
	}
	u := r.Usage
	if t.MaxSandboxes > 0 && u.Sandboxes+1 > t.MaxSandboxes {
		return errdefs.ResourceExhausted("%s runs %d sandboxes, its maximum is %d", who, u.Sandboxes, t.MaxSandboxes)
	}
	if t.MaxVCPU > 0 && u.VCPU+r.VCPU > t.MaxVCPU+1e-9 {
		return errdefs.ResourceExhausted("%s would run %s vCPU, its maximum is %s", who, fmtCPU(u.VCPU+r.VCPU), fmtCPU(t.MaxVCPU))
	}
	if t.MaxMemoryMiB > 0 && u.MemoryMiB+r.MemoryMiB > t.MaxMemoryMiB {
		return errdefs.ResourceExhausted("%s would use %d MiB of memory, its maximum is %d MiB", who, u.MemoryMiB+r.MemoryMiB, t.MaxMemoryMiB)
	}
	return nil
}

func fmtCPU(v float64) string {
	return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(math.Round(v*1000)/1000, 'f', 3, 64), "0"), ".")
}

func (p *Policy) imageNames() []string {
	var out []string
	for n := range p.Images {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// WithTenant records the calling tenant in ctx (the API server does this
// after authenticating a key). It is tenant.With.
func WithTenant(ctx context.Context, name string) context.Context {
	return tenant.With(ctx, name)
}

// TenantFrom returns the calling tenant, or "" for the daemon's own key.
// It is tenant.From.
func TenantFrom(ctx context.Context) string { return tenant.From(ctx) }

func hashKey(k string) ([32]byte, bool) {
	if h, ok := strings.CutPrefix(k, "sha256:"); ok {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			return [32]byte{}, false
		}
		return [32]byte(b), true
	}
	return sha256.Sum256([]byte(k)), true
}

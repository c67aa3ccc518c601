package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/tenant"
)

const (
	dAllowed = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	dOther   = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

const doc = `
images:
  debian-trixie: ` + dAllowed + `
default:
  instanceTypes: [lite, basic, standard-1, standard-2]
  internet: true
tenants:
  - name: team-a
    apiKeys: ["key-team-a-0123456789"]
    instanceTypes: [lite, standard-1]
    custom: { maxVCPU: 1, maxMemoryMiB: 2048, maxDiskMB: 4000 }
    maxSandboxes: 2
    maxVCPU: 1.5
    maxMemoryMiB: 6144
    internet: false
    egressRules: [api.github.com]
    nodeLabels: { pool: [shared, team-a] }
`

func load(t *testing.T) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ok is a request team-a may make; each test changes one thing.
func ok() Request {
	return Request{Tenant: "team-a", Sandbox: "s", Image: "debian-trixie", Digest: dAllowed, Instance: "standard-1", VCPU: 0.5, MemoryMiB: 4096, DiskMB: 8000}
}

func check(t *testing.T, r Request, kind error, want string) {
	t.Helper()
	p := load(t)
	if err := p.Admit(context.Background(), ok()); err != nil {
		t.Fatalf("control request refused: %v", err)
	}
	err := p.Admit(context.Background(), r)
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), want) {
		t.Fatalf("want %v containing %q, got %v", kind, want, err)
	}
}

func TestRefuseImageNotAllowed(t *testing.T) {
	r := ok()
	r.Image, r.Digest = "evil", dOther
	check(t, r, errdefs.ErrPermissionDenied, "not in the operator's image allowlist")
}

func TestRefuseSnapshotOfImageNotAllowed(t *testing.T) {
	r := ok()
	r.Snapshot, r.Digest = "snap1", dOther
	check(t, r, errdefs.ErrPermissionDenied, "snapshot snap1 is based on image")
}

func TestRefuseInstanceType(t *testing.T) {
	r := ok()
	r.Instance = "standard-4"
	check(t, r, errdefs.ErrPermissionDenied, `may not use instance type "standard-4"`)
}

func TestRefuseCustomSizeOutOfBounds(t *testing.T) {
	r := ok()
	r.Instance, r.VCPU, r.MemoryMiB = "custom", 0.5, 3000
	check(t, r, errdefs.ErrPermissionDenied, "custom memoryMib 3000 is above its bound 2048")
}

func TestRefuseCustomSizeWithoutBounds(t *testing.T) {
	p := load(t)
	r := ok()
	r.Tenant, r.Instance = "", "custom" // the default section has no custom bounds
	if err := p.Admit(context.Background(), r); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("custom size without bounds: %v", err)
	}
}

func TestRefuseMaxSandboxes(t *testing.T) {
	r := ok()
	r.VCPU, r.MemoryMiB = 0.1, 10
	r.Usage = Usage{Sandboxes: 2}
	check(t, r, errdefs.ErrResourceExhausted, "runs 2 sandboxes, its maximum is 2")
}

func TestRefuseMaxVCPU(t *testing.T) {
	r := ok()
	r.Usage = Usage{Sandboxes: 1, VCPU: 1.25}
	check(t, r, errdefs.ErrResourceExhausted, "would run 1.75 vCPU, its maximum is 1.5")
}

func TestRefuseMaxMemory(t *testing.T) {
	r := ok()
	r.Usage = Usage{Sandboxes: 1, VCPU: 0.1, MemoryMiB: 4096}
	check(t, r, errdefs.ErrResourceExhausted, "would use 8192 MiB of memory, its maximum is 6144 MiB")
}

func TestRefuseInternet(t *testing.T) {
	r := ok()
	r.Internet = true
	check(t, r, errdefs.ErrPermissionDenied, "may not start sandboxes with internet access")
}

func TestRefuseEgressRule(t *testing.T) {
	r := ok()
	r.EgressRules = []string{"api.github.com", "pypi.org"}
	check(t, r, errdefs.ErrPermissionDenied, `may not use egress rule "pypi.org"`)
}

func TestTenantByKeyAndDefault(t *testing.T) {
	p := load(t)
	if tn, found := p.TenantForKey("key-team-a-0123456789"); !found || tn.Name != "team-a" {
		t.Fatalf("key lookup: %v %v", tn, found)
	}
	if _, found := p.TenantForKey("key-team-a-012345678"); found {
		t.Fatal("a different key matched")
	}
	// The default section lets the operator's key have internet.
	r := ok()
	r.Tenant, r.Internet, r.Instance = "", true, "standard-2"
	if err := p.Admit(context.Background(), r); err != nil {
		t.Fatalf("default tenant: %v", err)
	}
}

func TestNodeLabels(t *testing.T) {
	p := load(t)
	got := p.NodeLabels("team-a")
	if len(got) != 1 || strings.Join(got["pool"], ",") != "shared,team-a" {
		t.Fatalf("team-a's node labels %v, want pool in [shared team-a]", got)
	}
	if got := p.NodeLabels("nobody"); got != nil {
		t.Fatalf("the default section's node labels %v, want none", got)
	}
	var none *Policy
	if none.NodeLabels("team-a") != nil {
		t.Fatal("no policy bounds no nodes")
	}
	for _, c := range []struct{ doc, want string }{
		{"default:\n  nodeLabels: [pool]\n", "nodeLabels must map label keys"},
		{"default:\n  nodeLabels: { pool: [] }\n", "nodeLabels.pool allows no value"},
		{"default:\n  nodeLabels: { pool: shared }\n", "nodeLabels.pool must be a list"},
	} {
		if _, err := Parse([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.doc, err, c.want)
		}
	}
}

func TestParseErrorsHaveLines(t *testing.T) {
	bad := `images:
  debian: sha256:abc
tenants:
  - name: t1
    apiKeys: [short]
    instanceTypes: [huge]
    maxSandboxes: -1
    internet: maybe
    colour: blue
  - apiKeys: ["0123456789abcdef0"]
surprise: 1
`
	_, err := Parse([]byte(bad))
	var ps Problems
	if !errors.As(err, &ps) || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("want Problems, got %v", err)
	}
	want := map[int]string{
		2:  "must be pinned to a digest",
		5:  "at least 16 characters",
		6:  `unknown instance type "huge"`,
		7:  "maxSandboxes must be between",
		8:  "internet must be true or false",
		9:  `unknown tenant field "colour"`,
		10: "a tenant needs a name",
		11: `unknown key "surprise"`,
	}
	for line, msg := range want {
		found := false
		for _, p := range ps {
			if p.Line == line && strings.Contains(p.Msg, msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem %q at line %d in:\n%v", msg, line, err)
		}
	}
	if _, err := Parse([]byte("images: [\n")); err == nil || !strings.Contains(err.Error(), "line") {
		t.Fatalf("syntax error: %v", err)
	}
}

// TestTenantIsInternalTenants: the tenant the API sets (WithTenant) is the
// one the node reads (tenant.From), and the other way round.
func TestTenantIsInternalTenants(t *testing.T) {
	ctx := context.Background()
	if got := tenant.From(WithTenant(ctx, "t1")); got != "t1" {
		t.Fatalf("tenant.From(WithTenant(t1)) = %q", got)
	}
	if got := TenantFrom(tenant.With(ctx, "t2")); got != "t2" {
		t.Fatalf("TenantFrom(tenant.With(t2)) = %q", got)
	}
}

// TestImageDigests: a copy of the allowlist, nil when it names none or
// there is no policy.
func TestImageDigests(t *testing.T) {
	p := &Policy{Images: map[string]string{"base": dAllowed}}
	got := p.ImageDigests()
	if len(got) != 1 || got["base"] != dAllowed {
		t.Fatalf("ImageDigests = %v", got)
	}
	got["base"] = dOther
	if p.Images["base"] != dAllowed {
		t.Fatal("ImageDigests handed out the policy's own map")
	}
	if got := (&Policy{}).ImageDigests(); got != nil {
		t.Fatalf("no allowlist: %v, want nil", got)
	}
	if got := (*Policy)(nil).ImageDigests(); got != nil {
		t.Fatalf("nil policy: %v, want nil", got)
	}
}

package local

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store/sqlite"
)

func policyRig(t *testing.T) *rig {
	r := newRig(t)
	r.cfg.Policy = &policy.Policy{
		Images:  map[string]string{"debian-trixie": "sha256:debian-trixie"},
		Tenants: []*policy.Tenant{{Name: "t1", MaxSandboxes: 2, MaxVCPU: 4, MaxMemoryMiB: 64 << 10}},
	}
	r.m = New(r.cfg)
	r.h = durable.NewHost(durable.Config{Store: r.cfg.Store.(*sqlite.Store), Compute: r.m.Compute(nil), Logf: t.Logf})
	attachControllers(t, r.m, r.h, r.now)
	return r
}

// TestPolicyEnforcedOnEveryStart checks that the controller asks the
// policy on create, on wake by get-or-create and on wake by exec, counts
// only the tenant's running sandboxes, and leaves no record behind when
// it refuses a create.
func TestPolicyEnforcedOnEveryStart(t *testing.T) {
	r := policyRig(t)
	t1 := policy.WithTenant(ctx, "t1")
	for _, n := range []string{"a", "b"} {
		if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: n}, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "c"}, false); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third sandbox: want resource exhausted, got %v", err)
	}
	if _, err := plane(r.m).Get(ctx, "c"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("refused create left a record: %v", err)
	}
	// Another tenant (the operator's key) is not counted against t1.
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "op"}, false); err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "c"}, false); err != nil {
		t.Fatalf("after one slept: %v", err)
	}
	// Waking a by exec would be a third running sandbox.
	var out bytes.Buffer
	if _, err := plane(r.m).Exec(ctx, "a", api.ExecRequest{Command: "true"}, &out, &out); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("wake by exec over quota: %v", err)
	}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "a"}, false); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("wake by get-or-create over quota: %v", err)
	}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "x", Image: "alpine"}, false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("image off the allowlist: %v", err)
	}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "y", Internet: ptr(true)}, false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("internet: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestPolicyQuotaUnderConcurrency races 6 creates against a quota of 2.
func TestPolicyQuotaUnderConcurrency(t *testing.T) {
	r := policyRig(t)
	t1 := policy.WithTenant(ctx, "t1")
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: fmt.Sprintf("r%d", i)}, false)
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ok != 2 {
		t.Fatalf("%d creates succeeded against a quota of 2", ok)
	}
}

// TestTenantsSeeOnlyTheirSandboxes: a tenant's key reaches only its own
// sandboxes by name and in lists; the operator's key reaches all.
func TestTenantsSeeOnlyTheirSandboxes(t *testing.T) {
	r := policyRig(t)
	t1, t2 := policy.WithTenant(ctx, "t1"), policy.WithTenant(ctx, "t2")
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "mine"}, false); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for what, err := range map[string]error{
		"get": func() error { _, err := plane(r.m).Get(t2, "mine"); return err }(),
		"exec": func() error {
			_, err := plane(r.m).Exec(t2, "mine", api.ExecRequest{Command: "true"}, &out, &out)
			return err
		}(),
		"sleep":   plane(r.m).Sleep(t2, "mine"),
		"destroy": plane(r.m).Destroy(t2, "mine"),
		"create": func() error {
			_, _, err := plane(r.m).GetOrCreate(t2, api.CreateSandboxRequest{Name: "mine"}, false)
			return err
		}(),
	} {
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s by another tenant: %v", what, err)
		}
	}
	if l, _ := plane(r.m).List(t2, control.ListFilter{}); len(l) != 0 {
		t.Fatalf("another tenant lists %+v", l)
	}
	if l, _ := plane(r.m).List(t1, control.ListFilter{}); len(l) != 1 {
		t.Fatalf("owner lists %+v", l)
	}
	if _, err := plane(r.m).Get(ctx, "mine"); err != nil {
		t.Fatalf("operator: %v", err)
	}
	if sb, err := plane(r.m).Get(t1, "mine"); err != nil || sb.State != api.StateRunning {
		t.Fatalf("owner after the refused calls: %+v %v", sb, err)
	}
}

// TestPolicyChecksEgressRules: a tenant names only the allow and inject
// hosts the operator listed, at create and when the policy of a running
// sandbox changes; deny entries are always fine.
func TestPolicyChecksEgressRules(t *testing.T) {
	r := policyRig(t)
	r.cfg.Policy.(*policy.Policy).Tenants[0].EgressRules = []string{"api.github.com"}
	t1 := policy.WithTenant(ctx, "t1")
	ok := api.NetworkPolicy{Allow: []string{"api.github.com"}, Deny: []string{"*.example.com"}}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "a", Network: &ok}, false); err != nil {
		t.Fatalf("allowed rules refused: %v", err)
	}
	bad := api.NetworkPolicy{Allow: []string{"api.github.com", "*.pypi.org"}}
	if _, _, err := plane(r.m).GetOrCreate(t1, api.CreateSandboxRequest{Name: "b", Network: &bad}, false); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("create with an unlisted allow host: want permission denied, got %v", err)
	}
	inject := api.NetworkPolicy{Inject: []api.InjectRule{{Host: "evil.test", SetHeaders: map[string]string{"X": "y"}}}}
	for _, p := range []api.NetworkPolicy{bad, inject, {Internet: true}} {
		if _, err := r.m.SetNetwork(t1, "a", p); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Fatalf("live change to %+v: want permission denied, got %v", p, err)
		}
	}
	got, err := r.m.GetNetwork(t1, "a")
	if err != nil || len(got.Allow) != 1 || got.Allow[0] != "api.github.com" {
		t.Fatalf("a refused change altered the policy: %+v %v", got, err)
	}
	// The rules are the sandbox's tenant's, whoever asks: the operator
	// widens them in the policy file, not around it.
	if _, err := r.m.SetNetwork(ctx, "a", bad); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("operator key changing a tenant's sandbox: want permission denied, got %v", err)
	}
	if _, err := r.m.SetNetwork(ctx, "a", api.NetworkPolicy{Deny: []string{"*.pypi.org"}}); err != nil {
		t.Fatalf("a deny-only change: %v", err)
	}
}

// TestSecretsAreOperatorOnly: a tenant key can neither set, list nor delete
// secrets (another tenant's inject rules may use them); the operator can.
func TestSecretsAreOperatorOnly(t *testing.T) {
	r := policyRig(t)
	t1 := policy.WithTenant(ctx, "t1")
	if err := r.m.SetSecret(ctx, "github", "s3cr3t"); err != nil {
		t.Fatalf("operator set: %v", err)
	}
	if err := r.m.SetSecret(t1, "github", "mine-now"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("tenant set: want permission denied, got %v", err)
	}
	if _, err := r.m.ListSecrets(t1); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("tenant list: want permission denied, got %v", err)
	}
	if err := r.m.DeleteSecret(t1, "github"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("tenant delete: want permission denied, got %v", err)
	}
	if v, ok, err := r.m.Secret(ctx, "github"); err != nil || !ok || v != "s3cr3t" {
		t.Fatalf("the secret changed under a refused tenant call: %q %v %v", v, ok, err)
	}
}

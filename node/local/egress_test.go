package local

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

type fakeEgress struct {
	mu       sync.Mutex
	ca       []string
	attached map[string]api.NetworkPolicy
	calls    []string
}

func (f *fakeEgress) InstallCA(rootfs string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ca = append(f.ca, rootfs)
	return nil
}
func (f *fakeEgress) Attach(name string, ip netip.Addr, p api.NetworkPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached[name] = p
	f.calls = append(f.calls, "attach "+name+" "+ip.String())
	return nil
}
func (f *fakeEgress) SetPolicy(name string, p api.NetworkPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached[name] = p
	f.calls = append(f.calls, "set "+name)
	return nil
}
func (f *fakeEgress) Detach(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.attached, name)
	f.calls = append(f.calls, "detach "+name)
}
func (f *fakeEgress) Forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "forget "+name)
}
func (f *fakeEgress) Log(name string, limit int) []api.EgressEvent {
	return []api.EgressEvent{{Host: "x.test"}}
}

func TestNetworkPolicyLifecycle(t *testing.T) {
	r := newRig(t)
	fe := &fakeEgress{attached: map[string]api.NetworkPolicy{}}
	r.cfg.Egress = fe
	r.m = newAttached(t, r.cfg)
	p := api.NetworkPolicy{Allow: []string{"api.internal.test"}, Inject: []api.InjectRule{{Host: "api.internal.test", SetHeaders: map[string]string{"Authorization": "Bearer ${secret:gh}"}}}}
	sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "n", Network: &p}, false)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Network == nil || sb.Network.Allow[0] != "api.internal.test" || sb.Internet {
		t.Fatalf("view: %+v", sb.Network)
	}
	if len(fe.ca) != 1 || fe.ca[0] != "/rootfs/"+sb.ID || fe.attached["n"].Allow[0] != "api.internal.test" {
		t.Fatalf("start: ca %v attached %+v", fe.ca, fe.attached)
	}
	// Bad policies are refused before anything changes.
	if _, err := r.m.SetNetwork(ctx, "n", api.NetworkPolicy{Allow: []string{"not a host"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad policy: %v", err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "bad", Network: &api.NetworkPolicy{Deny: []string{"*"}}}, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad policy at create: %v", err)
	}
	// A runtime change reaches the proxy and the record, without a restart.
	creates := r.rt.creates
	got, err := r.m.SetNetwork(ctx, "n", api.NetworkPolicy{Internet: true, Deny: []string{"*.bad.test"}})
	if err != nil || !got.Internet || fe.attached["n"].Deny[0] != "*.bad.test" {
		t.Fatalf("set: %+v %v %+v", got, err, fe.attached)
	}
	if again, _ := r.m.GetNetwork(ctx, "n"); !again.Internet || len(again.Deny) != 1 {
		t.Fatalf("read back: %+v", again)
	}
	if r.rt.creates != creates {
		t.Fatal("policy change restarted the sandbox")
	}
	if err := plane(r.m).Sleep(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if _, ok := fe.attached["n"]; ok {
		t.Fatal("sleeping sandbox still attached")
	}
	if _, err := r.m.SetNetwork(ctx, "n", api.NetworkPolicy{}); err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Destroy(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if last := fe.calls[len(fe.calls)-1]; last != "forget n" {
		t.Fatalf("calls %v", fe.calls)
	}
	if _, err := r.m.SetNetwork(ctx, "n", api.NetworkPolicy{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing sandbox: %v", err)
	}
}

func TestSecretsWriteOnly(t *testing.T) {
	r := newRig(t)
	if err := r.m.SetSecret(ctx, "gh", "tok-123"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "../x", "a b"} {
		if err := r.m.SetSecret(ctx, bad, "v"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if err := r.m.SetSecret(ctx, "empty", ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty value: %v", err)
	}
	list, err := r.m.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "gh" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if v, ok, err := r.m.Secret(ctx, "gh"); err != nil || !ok || v != "tok-123" {
		t.Fatalf("host-side read: %q %v %v", v, ok, err)
	}
	if _, ok, err := r.m.Secret(ctx, "nope"); err != nil || ok {
		t.Fatalf("missing secret: %v %v", ok, err)
	}
	if err := r.m.DeleteSecret(ctx, "gh"); err != nil {
		t.Fatal(err)
	}
	if err := r.m.DeleteSecret(ctx, "gh"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

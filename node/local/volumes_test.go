package local

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

type fakeVolumes struct {
	mu       sync.Mutex
	attached map[string][]api.VolumeMount
	events   []string
	refuse   error
}

func (f *fakeVolumes) Attach(ctx context.Context, sandbox, tenant, rootfs string, ms []api.VolumeMount, idmap IDRange) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return f.refuse
	}
	if rootfs == "" || idmap.Size == 0 {
		return errors.New("attach without a rootfs or an id map")
	}
	f.attached[sandbox] = ms
	f.events = append(f.events, "attach "+sandbox)
	return nil
}

func (f *fakeVolumes) Detach(ctx context.Context, sandbox, rootfs string, ms []api.VolumeMount) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.attached, sandbox)
	f.events = append(f.events, "detach "+sandbox)
	return nil
}

func TestCreateWithVolumes(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	vm := []api.VolumeMount{{Name: "data", Path: "/data"}}

	// Without a volume store, a create that asks for volumes is refused
	// and leaves nothing.
	_, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "nov", Volumes: vm}, true)
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("no volume store: want failed precondition, got %v", err)
	}

	fv := &fakeVolumes{attached: map[string][]api.VolumeMount{}}
	cfg := r.cfg
	cfg.Volumes = fv
	m := newAttached(t, cfg)
	p := plane(m)
	if _, _, err := p.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "v", Volumes: []api.VolumeMount{{Name: "x", Path: "/data/../etc"}}}, true); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("traversing path: %v", err)
	}
	// Refused for volumes (or, on a node without CRIU, for itself).
	if _, _, err := p.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "v", Volumes: vm, Sleep: api.SleepCheckpoint}, true); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) && !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("checkpoint with volumes: %v", err)
	}
	sb, _, err := p.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "v", Volumes: vm}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(sb.Volumes) != 1 || sb.Volumes[0] != vm[0] {
		t.Fatalf("view: %+v", sb.Volumes)
	}
	if got := fv.attached["v"]; len(got) != 1 {
		t.Fatalf("not attached: %+v", fv.attached)
	}
	if err := p.Sleep(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if _, ok := fv.attached["v"]; ok {
		t.Fatal("a stopped sandbox kept its volumes")
	}
	// A wake that the volume store refuses leaves the sandbox asleep.
	fv.refuse = errdefs.FailedPrecondition(`volume "data" is mounted read-write by sandbox "w"`)
	if _, _, err := p.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "v"}, false); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("refused wake: %v", err)
	}
	if got, err := p.Get(ctx, "v"); err != nil || got.State != api.StateSleeping {
		t.Fatalf("after a refused wake: %+v %v", got, err)
	}
	// A refused create leaves nothing.
	if _, _, err := p.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "w2", Volumes: vm}, true); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("refused create: %v", err)
	}
	if _, err := p.Get(ctx, "w2"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused create left a record: %v", err)
	}
	fv.refuse = nil
	if _, _, err := p.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "v"}, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if _, ok := fv.attached["v"]; ok {
		t.Fatal("a destroyed sandbox kept its volumes")
	}
}

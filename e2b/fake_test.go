package e2b

import (
	"context"
	"io"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// fakeBackend keeps sandboxes in memory; every sandbox shares one
// in-process agent.
type fakeBackend struct {
	mu      sync.Mutex
	sbs     map[string]api.Sandbox
	ag      *agentclient.Client
	callers []string // policy.TenantFrom of each GetOrCreate
}

func newFake(t *testing.T) (*fakeBackend, *agenttest.Agent) {
	a := agenttest.Start(t)
	c := agentclient.New(a.Socket)
	t.Cleanup(c.Close)
	return &fakeBackend{sbs: map[string]api.Sandbox{}, ag: c}, a
}

func (f *fakeBackend) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.callers = append(f.callers, policy.TenantFrom(ctx))
	if sb, ok := f.sbs[req.Name]; ok {
		if createOnly {
			return api.Sandbox{}, false, errdefs.AlreadyExists("exists")
		}
		sb.State = api.StateRunning
		f.sbs[req.Name] = sb
		return sb, false, nil
	}
	now := time.Now()
	sb := api.Sandbox{Name: req.Name, State: api.StateRunning, Labels: maps.Clone(req.Labels), CreatedAt: now, StartedAt: &now,
		Resources: api.Resources{VCPU: 1, MemoryMiB: 256}, Volumes: req.Volumes, Image: req.Image, Start: req.Start}
	f.sbs[req.Name] = sb
	return sb, true, nil
}

func (f *fakeBackend) Get(_ context.Context, name string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[name]
	if !ok {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	return sb, nil
}

func (f *fakeBackend) List(_ context.Context, lf control.ListFilter) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for _, sb := range f.sbs {
		ok := true
		for k, v := range lf.Labels {
			ok = ok && sb.Labels[k] == v
		}
		if ok {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (f *fakeBackend) Destroy(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sbs[name]; !ok {
		return errdefs.NotFound("sandbox %q not found", name)
	}
	delete(f.sbs, name)
	return nil
}

func (f *fakeBackend) Sleep(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sbs[name]
	sb.State, sb.SleepTier = api.StateSleeping, api.SleepStop
	if sb.Sleep == api.SleepFreeze {
		sb.SleepTier = api.SleepFreeze
	}
	f.sbs[name] = sb
	return nil
}

func (f *fakeBackend) Exec(context.Context, string, api.ExecRequest, io.Writer, io.Writer) (api.ExitStatus, error) {
	return api.ExitStatus{}, errdefs.Internal("not in the fake")
}

func (f *fakeBackend) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if _, err := f.Get(ctx, name); err != nil {
		return nil, nil, err
	}
	return f.ag, func() {}, nil
}

func (f *fakeBackend) Snapshot(context.Context, string, api.SnapshotRequest) (api.Snapshot, error) {
	return api.Snapshot{}, errdefs.Internal("not in the fake")
}
func (f *fakeBackend) GetSnapshot(context.Context, string) (api.Snapshot, error) {
	return api.Snapshot{}, errdefs.NotFound("no snapshots in the fake")
}
func (f *fakeBackend) ListSnapshots(context.Context, string, string) ([]api.Snapshot, error) {
	return nil, nil
}
func (f *fakeBackend) DeleteSnapshot(context.Context, string) error {
	return errdefs.NotFound("no snapshots in the fake")
}
func (f *fakeBackend) Fork(context.Context, string, api.ForkRequest) (api.ForkResult, error) {
	return api.ForkResult{}, errdefs.Internal("not in the fake")
}

func (f *fakeBackend) SetLabels(_ context.Context, name string, set map[string]string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[name]
	if !ok {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	for k, v := range set {
		if v == "" {
			delete(sb.Labels, k)
		} else {
			sb.Labels[k] = v
		}
	}
	f.sbs[name] = sb
	return sb, nil
}

func (f *fakeBackend) SetNetwork(_ context.Context, name string, p api.NetworkPolicy) (api.NetworkPolicy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sbs[name]
	sb.Network, sb.Internet = &p, p.Internet
	f.sbs[name] = sb
	return p, nil
}

package control_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

// fakeNode answers Status and Agent from a table; other calls panic.
type fakeNode struct {
	node.Node
	exists map[string]bool
	agents int // Agent calls
}

func (f *fakeNode) Status(ctx context.Context, name string) (node.Status, error) {
	return node.Status{Exists: f.exists[name]}, nil
}

func (f *fakeNode) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	f.agents++
	if !f.exists[name] {
		return nil, nil, errdefs.NotFound("sandbox %q not found", name)
	}
	return nil, nil, errdefs.PermissionDenied("sandbox %q belongs to another tenant", name)
}

func newPlane(t *testing.T) (*control.Plane, *fakeNode, store.Store) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fn := &fakeNode{exists: map[string]bool{"there": true}}
	return control.NewPlane(control.PlaneConfig{Store: st, Node: fn}), fn, st
}

// The inventory is the store's records, by state, labels and tenant.
func TestPlaneList(t *testing.T) {
	p, _, st := newPlane(t)
	ctx := context.Background()
	for _, r := range []store.Sandbox{
		{Name: "b", ID: "s2", State: api.StateSleeping, Labels: map[string]string{"team": "x"}},
		{Name: "a", ID: "s1", State: api.StateRunning, Labels: map[string]string{"team": "x"}},
		{Name: "c", ID: "s3", State: api.StateRunning, Tenant: "t1"},
	} {
		if _, err := st.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	names := func(l []api.Sandbox) (out []string) {
		for _, s := range l {
			out = append(out, s.Name)
		}
		return out
	}
	for _, c := range []struct {
		ctx  context.Context
		f    control.ListFilter
		want string
	}{
		{ctx, control.ListFilter{}, "[a b c]"},
		{ctx, control.ListFilter{State: api.StateRunning}, "[a c]"},
		{ctx, control.ListFilter{Labels: map[string]string{"team": "x"}}, "[a b]"},
		{ctx, control.ListFilter{State: api.StateRunning, Labels: map[string]string{"team": "x"}}, "[a]"},
		{policy.WithTenant(ctx, "t1"), control.ListFilter{}, "[c]"},
	} {
		l, err := p.List(c.ctx, c.f)
		if got := fmt.Sprint(names(l)); err != nil || got != c.want {
			t.Errorf("List(%+v) = %s, %v; want %s", c.f, got, err, c.want)
		}
	}
	if l, _ := p.List(ctx, control.ListFilter{State: api.StateRunning}); len(l) == 0 || l[0].Network == nil || l[0].Isolation != api.IsolationRunc {
		t.Fatalf("the view lacks its defaults: %+v", l)
	}
}

// Only a sandbox that does not run is woken: a missing one or another
// tenant's is the node's answer, with no wake (which would need an
// object host this plane lacks, and fail differently).
func TestPlaneUseWakesOnlyWhatSleeps(t *testing.T) {
	p, fn, _ := newPlane(t)
	ctx := context.Background()
	if _, _, err := p.Agent(ctx, "missing"); !errors.Is(err, errdefs.ErrNotFound) || fn.agents != 1 {
		t.Fatalf("agent of a missing sandbox: %v after %d Agent calls", err, fn.agents)
	}
	if err := p.WriteFile(ctx, "there", "/x", nil, 0o644); !errors.Is(err, errdefs.ErrPermissionDenied) || fn.agents != 2 {
		t.Fatalf("write to another tenant's sandbox: %v after %d Agent calls", err, fn.agents)
	}
	if _, _, err := p.Agent(ctx, "../bad"); !errors.Is(err, errdefs.ErrInvalidArgument) || fn.agents != 2 {
		t.Fatalf("a bad name reached the node: %v", err)
	}
	if _, err := p.Get(ctx, "missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get of a missing sandbox: %v", err)
	}
	if err := p.Destroy(ctx, "missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("destroy of a missing sandbox: %v", err)
	}
}

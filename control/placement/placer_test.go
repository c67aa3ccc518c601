package placement

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

type snapshotsMap map[string]store.Snapshot

func (m snapshotsMap) GetSnapshot(_ context.Context, id string) (store.Snapshot, error) {
	s, ok := m[id]
	if !ok {
		return store.Snapshot{}, errdefs.NotFound("no snapshot %q", id)
	}
	return s, nil
}

func placerNode(name string, images []string, layers map[string]int64, now time.Time) store.Node {
	return store.Node{
		Name: name, Roles: []string{"control", RoleNode}, Isolation: []string{api.IsolationRunc},
		Capacity:  store.NodeResources{MilliCPU: 2000, MemoryBytes: 8 << 30, DiskBytes: 100e9},
		Images:    images,
		Layers:    layers,
		Heartbeat: now,
	}
}

// TestPlacerTurnsCreatesIntoRequests: the image a create names resolves
// to the digest a node holds, a snapshot's chain to the layers a node
// caches, the instance to the resources it commits; each steers the pick,
// and a size no node has room for is refused.
func TestPlacerTurnsCreatesIntoRequests(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	src := &listSource{now: now, nodes: []store.Node{
		placerNode("a", nil, nil, now),
		placerNode("b", []string{"sha256:img"}, nil, now),
		placerNode("c", nil, map[string]int64{"l1": 100, "l2": 900}, now),
	}}
	snaps := snapshotsMap{
		"snap_2": {ID: "snap_2", SizeBytes: 900, Chain: []store.Layer{{ID: "snap_1", SHA256: "l1"}, {ID: "snap_2", SHA256: "l2"}}},
		"snap_1": {ID: "snap_1", SizeBytes: 100},
	}
	p := NewPlacer(PlacerConfig{
		Nodes: NewNodeCache(src, time.Hour),
		Resources: func(instance string, _ *api.Resources) (api.Resources, error) {
			if instance == "huge" {
				return api.Resources{VCPU: 64, MemoryMiB: 1 << 20}, nil
			}
			return api.Resources{VCPU: 0.0625, MemoryMiB: 256, DiskMB: 2000}, nil
		},
		Image: func(_ context.Context, ref string) string {
			if ref == "" {
				return "sha256:img"
			}
			return ""
		},
		Snapshots: snaps,
		Options:   Options{Margin: -1}, // no spread: the best wins
	})
	ctx := context.Background()
	if got, err := p.Place(ctx, api.CreateSandboxRequest{Name: "fresh"}); err != nil || got != "b" {
		t.Fatalf("default image: %q %v, want b (holds it)", got, err)
	}
	if got, err := p.Place(ctx, api.CreateSandboxRequest{Name: "restored", Image: "other", Snapshot: "snap_2"}); err != nil || got != "c" {
		t.Fatalf("from snapshot: %q %v, want c (caches its chain)", got, err)
	}
	_, err := p.Place(ctx, api.CreateSandboxRequest{Name: "big", Instance: "huge"})
	if !errdefs.IsKind(err, errdefs.ErrResourceExhausted) && !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("too big for every node: %v, want resource exhausted or invalid argument", err)
	}

	// Negative control: with the locality terms weighted zero the
	// snapshot's node is no longer preferred (ties go by name).
	flat := NewPlacer(PlacerConfig{Nodes: NewNodeCache(src, time.Hour), Snapshots: snaps,
		Options: Options{Margin: -1, Weights: &Weights{Free: 1}}})
	if got, err := flat.Place(ctx, api.CreateSandboxRequest{Name: "restored", Snapshot: "snap_2"}); err != nil || got == "c" {
		t.Fatalf("without locality: %q %v, want a node other than c", got, err)
	}
}

// TestPlacerSeesDrainAtOnce: a drain stored after the node list was
// cached holds for the very next create, because the Placer confirms its
// pick against the node's fresh entry; a node that left is not picked
// either. The negative control is the cached list itself, which still
// offers the drained node as the best.
func TestPlacerSeesDrainAtOnce(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	src := &listSource{now: now, nodes: []store.Node{
		placerNode("a", []string{"sha256:img"}, nil, now),
		placerNode("b", nil, nil, now),
		placerNode("c", nil, nil, now),
	}}
	cache := NewNodeCache(src, time.Hour) // never refreshed by age in this test
	var logs []string
	p := NewPlacer(PlacerConfig{
		Nodes:   cache,
		Image:   func(context.Context, string) string { return "sha256:img" },
		Options: Options{Margin: -1},
		Logf:    func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
	})
	ctx := context.Background()
	if got, err := p.Place(ctx, api.CreateSandboxRequest{Name: "s0"}); err != nil || got != "a" {
		t.Fatalf("before the drain: %q %v, want a (holds the image)", got, err)
	}

	src.mu.Lock()
	src.nodes[0].Draining = true
	src.mu.Unlock()
	cached, cnow, err := cache.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := p.request(ctx, api.CreateSandboxRequest{})
	if d, err := Place(cached, cnow, r, Options{Margin: -1}); err != nil || d.Node.Name != "a" {
		t.Fatalf("negative control: the cached list places on %q (%v), want a (it predates the drain)", d.Node.Name, err)
	}
	got, err := p.Place(ctx, api.CreateSandboxRequest{Name: "s1"})
	if err != nil || got == "a" {
		t.Fatalf("after the drain: %q %v, want a node other than the draining a", got, err)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "node a is draining") {
		t.Fatalf("logs %q, want one re-placement for the drained a", logs)
	}
	reads := src.nodeReads.Load()
	if got, err := p.Place(ctx, api.CreateSandboxRequest{Name: "s2"}); err != nil || got == "a" || src.nodeReads.Load() != reads {
		t.Fatalf("next create: %q %v (list reads %d → %d), want a node other than a from the cache, without reading the list", got, err, reads, src.nodeReads.Load())
	}

	// A pick whose entry is gone: the list is read again and the create
	// lands on a node that is still there.
	src.mu.Lock()
	src.nodes = src.nodes[:2] // c leaves; b is the only one left taking placements
	src.mu.Unlock()
	for i := range 5 {
		if got, err := p.Place(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("t%d", i)}); err != nil || got != "b" {
			t.Fatalf("after c left: %q %v, want b", got, err)
		}
	}

	// Every node drained: the create is refused as unavailable, naming the drain.
	src.mu.Lock()
	src.nodes[1].Draining = true
	src.mu.Unlock()
	cache.Invalidate()
	if _, err := p.Place(ctx, api.CreateSandboxRequest{Name: "u"}); !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "drain") {
		t.Fatalf("all drained: %v, want unavailable naming the drain", err)
	}
}

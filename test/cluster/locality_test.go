//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

// localityCreates is how many creates from the snapshot each phase sends.
// Without the locality term node 3 is picked with probability at most 1/2
// per create (the spread picks uniformly among the nodes within the margin
// of the best; at least two are), so all of them landing there by chance
// has probability at most 2^-10 < 1e-3: the negative control cannot pass
// by luck more often than that.
const localityCreates = 10

// localityScene makes a sandbox on node 3 with a file, snapshots it there,
// starts a second sandbox from the snapshot on node 3 (taking a snapshot
// uploads it to S3 without caching it as a layer; a start from it fetches
// the layer into the node's cache, which the node's heartbeat then lists)
// and waits until node 3's entry lists the snapshot's layer and no other
// node's does. It returns the snapshot.
func localityScene(t *testing.T, prefix string) api.Snapshot {
	t.Helper()
	ctx := context.Background()
	n3 := node(3)
	src := createPinned(t, n3, api.CreateSandboxRequest{Name: prefix + "-src", Instance: "lite"})
	if res := execVia(t, n3, src.Name, "head -c 2097152 /dev/urandom > /home/user/data && echo -n "+prefix+" > /home/user/mark"); res.ExitCode != 0 {
		t.Fatalf("write in %s: %+v", src.Name, res)
	}
	snap, err := n3.c.Snapshot(ctx, src.Name, api.SnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot %s on n3: %v", src.Name, err)
	}
	t.Cleanup(func() { _ = liveNode().c.DeleteSnapshot(context.Background(), snap.ID) })
	createPinned(t, n3, api.CreateSandboxRequest{Name: prefix + "-warm", Instance: "lite", Snapshot: snap.ID})
	if err := waitFor(10*heartbeat, func() error { return layerOnlyOn(snap.SHA256, "n3") }); err != nil {
		t.Fatalf("snapshot %s (layer %s): %v", snap.ID, snap.SHA256, err)
	}
	return snap
}

// layerOnlyOn checks that the cluster's node list (through node 1) shows
// layer on node want and on no other.
func layerOnlyOn(layer, want string) error {
	list, err := node(1).c.ListNodes(context.Background())
	if err != nil {
		return err
	}
	var holders []string
	for _, n := range list.Nodes {
		if _, ok := n.Layers[layer]; ok {
			holders = append(holders, n.Name)
		}
	}
	if len(holders) != 1 || holders[0] != want {
		return fmt.Errorf("layer held by %v, want only %s", holders, want)
	}
	return nil
}

// createFromSnapshot creates count sandboxes from snap through via, one at
// a time, each destroyed right after it answered with the snapshot's file;
// it returns how many landed on each node.
func createFromSnapshot(t *testing.T, via *clusterNode, prefix string, snap api.Snapshot, count int) map[string]int {
	t.Helper()
	ctx := context.Background()
	on := map[string]int{}
	for k := range count {
		name := fmt.Sprintf("%s-%02d", prefix, k)
		sb := create(t, via, api.CreateSandboxRequest{Name: name, Instance: "lite", Snapshot: snap.ID})
		on[sb.Node]++
		owner := byName(sb.Node)
		if owner == nil {
			t.Fatalf("%s: placed on %q, not a node of the cluster", name, sb.Node)
		}
		if res := execVia(t, via, name, "cat /home/user/mark"); res.ExitCode != 0 || !strings.HasPrefix(snap.Sandbox, strings.TrimSpace(res.Stdout)) {
			t.Fatalf("%s (on %s) from snapshot %s of %s reads %+v", name, sb.Node, snap.ID, snap.Sandbox, res)
		}
		if err := owner.c.Destroy(ctx, name); err != nil {
			t.Fatalf("destroy %s: %v", name, err)
		}
	}
	return on
}

// TestLocality: a sandbox created (through node 1) from a snapshot whose
// layer only node 3 holds is placed on node 3 while node 3 has room, every
// time; with node 3 full (sandboxes pinned there committing all its free
// CPU) it is placed elsewhere and still starts from the snapshot (the
// layer comes from S3).
func TestLocality(t *testing.T) {
	ctx := context.Background()
	n1, n3 := node(1), node(3)
	snap := localityScene(t, "cl-loc")
	// Room for all the creates, as the entry node sees it (an earlier
	// test's sandboxes may still count until n3's next heartbeat).
	waitRoom(t, "n3", localityCreates*63)
	t0 := time.Now()
	on := createFromSnapshot(t, n1, "cl-loc-room", snap, localityCreates)
	t.Logf("with room: %d creates from snapshot %s through n1 in %s placed %v", localityCreates, snap.ID, time.Since(t0).Round(time.Millisecond), on)
	if on["n3"] != localityCreates {
		t.Fatalf("with room on n3, which alone holds the snapshot's layer, %d of %d creates from it landed there: %v", on["n3"], localityCreates, on)
	}

	// No room: sandboxes pinned on n3 take all the CPU it has left. The
	// entry lags a heartbeat behind (a sandbox destroyed just now may
	// still count), so it tops up until less than a lite sandbox's CPU
	// (63 mCPU) is left.
	const liteMilli = 63
	var fillers []string
	for i := 0; ; i++ {
		e, err := n1.c.GetNode(ctx, "n3")
		if err != nil {
			t.Fatal(err)
		}
		left := e.Capacity.MilliCPU - e.Committed.MilliCPU
		if left < liteMilli {
			t.Logf("n3 full: %d of %d mCPU committed, with %d fillers", e.Committed.MilliCPU, e.Capacity.MilliCPU, len(fillers))
			break
		}
		if i == 4 {
			t.Fatalf("n3 still has %d mCPU left after %d fillers: %+v", left, len(fillers), e)
		}
		f := createPinned(t, n3, api.CreateSandboxRequest{Name: fmt.Sprintf("cl-loc-filler-%d", i),
			Resources: &api.Resources{VCPU: float64(left) / 1000, MemoryMiB: 128, DiskMB: 500}})
		fillers = append(fillers, f.Name)
		time.Sleep(3 * heartbeat) // its next heartbeat reports it
	}
	time.Sleep(2 * time.Second) // past the placer's node cache (1 s)
	full := createFromSnapshot(t, n1, "cl-loc-full", snap, 2)
	t.Logf("n3 full: creates from snapshot %s through n1 placed %v", snap.ID, full)
	if full["n3"] != 0 {
		t.Fatalf("with n3 full, %d creates from the snapshot were still placed there: %v", full["n3"], full)
	}
	for _, f := range fillers {
		if err := n3.c.Destroy(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	waitRoom(t, "n3", 1000) // the next test finds n3 with room
}

// waitRoom waits until node 1's view of node name has at least milli mCPU
// uncommitted.
func waitRoom(t *testing.T, name string, milli int64) {
	t.Helper()
	if err := waitFor(10*heartbeat, func() error {
		e, err := node(1).c.GetNode(context.Background(), name)
		if err != nil {
			return err
		}
		if left := e.Capacity.MilliCPU - e.Committed.MilliCPU; left < milli {
			return fmt.Errorf("%s has %d mCPU uncommitted, want %d", name, left, milli)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestLocalityNegativeControl: with the locality term off on node 1
// (weaken.Locality: the image and chain weights zero) the same creates
// through node 1 no longer all land on node 3, so TestLocality's check
// does tell locality from chance.
func TestLocalityNegativeControl(t *testing.T) {
	n1 := node(1)
	snap := localityScene(t, "cl-locneg")
	n1.d.Stop()
	restartOnCleanup(t, n1)
	if err := n1.start([]string{weaken.EnvVar + "=" + weaken.Locality}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(4*stale, func() error { return allAlive(n1) }); err != nil {
		t.Fatal(err)
	}
	on := createFromSnapshot(t, n1, "cl-locneg", snap, localityCreates)
	t.Logf("locality off on n1: %d creates from snapshot %s placed %v", localityCreates, snap.ID, on)
	if on["n3"] == localityCreates {
		t.Fatalf("with the locality term off all %d creates still landed on n3 (%v): the locality test cannot tell locality from chance", localityCreates, on)
	}
}

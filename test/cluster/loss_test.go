//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// createOn creates a sandbox through via until one lands on via itself
// (placement may choose another node), destroying the misses, and returns
// it.
func createOn(t *testing.T, via *clusterNode, prefix string, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	for try := range 8 {
		req.Name = fmt.Sprintf("%s-%d", prefix, try)
		sb := create(t, via, req)
		if sb.Node == via.name {
			return sb
		}
		if err := liveNodeExcept(nil).c.Destroy(context.Background(), req.Name); err != nil {
			t.Logf("destroy the miss %s (on %s): %v", req.Name, sb.Node, err)
		}
	}
	t.Fatalf("8 creates through %s never landed on it", via.name)
	return api.Sandbox{}
}

// liveNodeExcept returns a live node other than skip.
func liveNodeExcept(skip *clusterNode) *clusterNode {
	for _, n := range cluster[1:] {
		if n != skip && n.alive() {
			return n
		}
	}
	return cluster[1]
}

// restartOnCleanup brings n back (plain, no test switches) when t ends, so
// the next test has the whole cluster.
func restartOnCleanup(t *testing.T, n *clusterNode) {
	t.Cleanup(func() {
		if n.alive() {
			_ = n.signal(syscall.SIGCONT)
			n.d.Stop()
		}
		if err := n.start(nil); err != nil {
			t.Errorf("restart %s: %v", n.name, err)
		}
	})
}

// TestNodeLoss: a sandbox on node 3 with a file in it is put to sleep
// (in a cluster a sleep persists to S3), node 3 is killed with SIGKILL,
// and the next request through node 1 answers from another node with the
// file intact (sha256). The time from the kill to that answer is the
// figure it reports.
func TestNodeLoss(t *testing.T) {
	ctx := context.Background()
	n3, n1 := node(3), node(1)
	sb := createOn(t, n3, "cl-loss", api.CreateSandboxRequest{Instance: "lite"})
	res := execVia(t, n3, sb.Name, "head -c 4194304 /dev/urandom > /home/user/blob && sha256sum /home/user/blob | cut -d' ' -f1")
	want := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || len(want) != 64 {
		t.Fatalf("write the file: %+v", res)
	}
	if err := n3.c.Sleep(ctx, sb.Name); err != nil {
		t.Fatalf("sleep %s through n3: %v", sb.Name, err)
	}
	before, err := readRecord(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if before.State != api.StateSleeping || before.Owner != "n3" {
		t.Fatalf("after the sleep the record is %+v, want sleeping on n3", before)
	}

	restartOnCleanup(t, n3)
	kill := time.Now()
	n3.d.Kill9()
	var got api.ExecResult
	var tries int
	var lastErr error
	err = waitFor(90*time.Second, func() error {
		tries++
		r, err := n1.c.Exec(ctx, sb.Name, api.ExecRequest{Command: "sha256sum /home/user/blob | cut -d' ' -f1", TimeoutMs: 30000})
		if err != nil {
			lastErr = err
			return err
		}
		got = r
		return nil
	})
	took := time.Since(kill)
	if err != nil {
		t.Fatalf("no answer through n1 for %s %s after node 3 was killed (%d tries): %v", sb.Name, took.Round(time.Millisecond), tries, err)
	}
	t.Logf("node loss: kill of n3 to an answer through n1 in %s (%d tries; the last refusal: %v)", took.Round(time.Millisecond), tries, lastErr)
	if lastErr != nil && !errdefs.IsKind(lastErr, errdefs.ErrUnavailable) {
		t.Errorf("while the owner was dead requests must fail unavailable; got %v", lastErr)
	}
	if strings.TrimSpace(got.Stdout) != want {
		t.Fatalf("after the takeover the file's sha256 is %q (%+v), want %s", got.Stdout, got, want)
	}
	after, err := readRecord(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Owner == "n3" || after.Owner == "" || after.OwnerEpoch <= before.OwnerEpoch {
		t.Fatalf("the record after the takeover is %+v (before %+v): want a new owner and a higher epoch", after, before)
	}
	cur, err := n1.c.Get(ctx, sb.Name)
	if err != nil || cur.Node != after.Owner {
		t.Fatalf("GET through n1 says %q (%v), the record %q", cur.Node, err, after.Owner)
	}
	t.Logf("%s moved from n3 (epoch %d) to %s (epoch %d)", sb.Name, before.OwnerEpoch, after.Owner, after.OwnerEpoch)
}

// fillNode pins sandboxes on n until less than a lite sandbox's CPU (63
// mCPU) is left uncommitted there, as node 1 sees it (a heartbeat behind),
// and returns their names (destroyed when t ends).
func fillNode(t *testing.T, n *clusterNode, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	const liteMilli = 63
	var fillers []string
	for i := 0; ; i++ {
		e, err := node(1).c.GetNode(ctx, n.name)
		if err != nil {
			t.Fatal(err)
		}
		left := e.Capacity.MilliCPU - e.Committed.MilliCPU
		if left < liteMilli {
			t.Logf("%s full: %d of %d mCPU committed, with %d fillers", n.name, e.Committed.MilliCPU, e.Capacity.MilliCPU, len(fillers))
			return fillers
		}
		if i == 4 {
			t.Fatalf("%s still has %d mCPU left after %d fillers: %+v", n.name, left, len(fillers), e)
		}
		f := createPinned(t, n, api.CreateSandboxRequest{Name: fmt.Sprintf("%s-%d", prefix, i),
			Resources: &api.Resources{VCPU: float64(left) / 1000, MemoryMiB: 128, DiskMB: 500}})
		fillers = append(fillers, f.Name)
		time.Sleep(3 * heartbeat) // its next heartbeat reports it
	}
}

// TestNodeLossPlaced: the takeover of a dead node's sandbox goes where
// placement says, not to the member the request reached. Node 3's
// sandbox, asleep (persisted to S3), is asked for through node 1 after
// node 3 was killed; node 1 is full (sandboxes pinned there commit all its
// free CPU), so placement chooses node 2, the record names node 2 at the
// next epoch, node 1 forwards the request there, and the file is intact.
// (TestNodeLoss, with node 1 not full, is the case where the entry itself
// may take it.)
func TestNodeLossPlaced(t *testing.T) {
	ctx := context.Background()
	n1, n3 := node(1), node(3)
	sb := createOn(t, n3, "cl-lossp", api.CreateSandboxRequest{Instance: "lite"})
	res := execVia(t, n3, sb.Name, "head -c 1048576 /dev/urandom > /home/user/blob && sha256sum /home/user/blob | cut -d' ' -f1")
	want := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || len(want) != 64 {
		t.Fatalf("write the file: %+v", res)
	}
	if err := n3.c.Sleep(ctx, sb.Name); err != nil {
		t.Fatalf("sleep %s through n3: %v", sb.Name, err)
	}
	before, err := readRecord(ctx, sb.Name)
	if err != nil || before.Owner != "n3" || before.State != api.StateSleeping {
		t.Fatalf("after the sleep the record is %+v (%v), want sleeping on n3", before, err)
	}
	fillNode(t, n1, "cl-lossp-filler")
	time.Sleep(2 * time.Second) // past the placer's node cache (1 s)

	restartOnCleanup(t, n3)
	kill := time.Now()
	n3.d.Kill9()
	var got api.ExecResult
	var lastErr error
	err = waitFor(90*time.Second, func() error {
		r, err := n1.c.Exec(ctx, sb.Name, api.ExecRequest{Command: "sha256sum /home/user/blob | cut -d' ' -f1", TimeoutMs: 30000})
		if err != nil {
			lastErr = err
			return err
		}
		got = r
		return nil
	})
	took := time.Since(kill)
	if err != nil {
		t.Fatalf("no answer through n1 for %s %s after node 3 was killed: %v", sb.Name, took.Round(time.Millisecond), err)
	}
	if lastErr != nil && !errdefs.IsKind(lastErr, errdefs.ErrUnavailable) {
		t.Errorf("while the owner was dead requests must fail unavailable; got %v", lastErr)
	}
	after, err := readRecord(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("placed takeover: kill of n3 to an answer through the full n1 in %s; %s moved from n3 (epoch %d) to %s (epoch %d)",
		took.Round(time.Millisecond), sb.Name, before.OwnerEpoch, after.Owner, after.OwnerEpoch)
	if after.Owner != "n2" || after.OwnerEpoch <= before.OwnerEpoch {
		t.Fatalf("with n1 full the takeover went to %q (epoch %d, before %d): want n2, placement's only choice", after.Owner, after.OwnerEpoch, before.OwnerEpoch)
	}
	if strings.TrimSpace(got.Stdout) != want {
		t.Fatalf("after the takeover the file's sha256 is %q (%+v), want %s", got.Stdout, got, want)
	}
	if cur, err := n1.c.Get(ctx, sb.Name); err != nil || cur.Node != "n2" {
		t.Fatalf("GET through n1 says %q (%v), want n2", cur.Node, err)
	}
}

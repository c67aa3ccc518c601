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

//go:build cluster

package cluster_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// partitionTable is the nftables table that cuts node 1 off from
// PostgreSQL, in node 1's own namespace (it goes with the namespace).
var partitionTable = "berthc" + id + "part"

// inNetns runs a command in node n's network namespace.
func inNetns(n *clusterNode, args ...string) error {
	return sh(append([]string{"nsenter", "--net=/run/netns/" + n.netns, "--"}, args...)...)
}

// partition drops every packet between n and PostgreSQL's port, both ways
// (no reset: a silent partition, the hard case).
func partition(n *clusterNode) error {
	port := strconv.Itoa(pg.Port())
	for _, c := range [][]string{
		{"nft", "add", "table", "inet", partitionTable},
		{"nft", "add", "chain", "inet", partitionTable, "out", "{ type filter hook output priority -10 ; policy accept ; }"},
		{"nft", "add", "chain", "inet", partitionTable, "in", "{ type filter hook input priority -10 ; policy accept ; }"},
		{"nft", "add", "rule", "inet", partitionTable, "out", "ip", "daddr", hubIP, "tcp", "dport", port, "drop"},
		{"nft", "add", "rule", "inet", partitionTable, "in", "ip", "saddr", hubIP, "tcp", "sport", port, "drop"},
	} {
		if err := inNetns(n, c...); err != nil {
			return err
		}
	}
	return nil
}

func heal(n *clusterNode) error { return inNetns(n, "nft", "delete", "table", "inet", partitionTable) }

// TestPartition: with node 1 cut off from PostgreSQL it refuses work
// cleanly (503 unavailable, and a refused create leaves no record) while
// the other nodes keep working, and it works again once the partition
// heals, without a restart. A request already in flight at the cut (it
// passed node 1's gate and waits on the store) fails once node 1 turns
// stale, within --node-stale plus two heartbeat periods of the cut (the
// last heartbeat that got through was at most one period before it), not
// when the connection's own 20 s timeout gives up. The times to the first
// refusal and back are the figures it reports.
func TestPartition(t *testing.T) {
	ctx := context.Background()
	n1, n2 := node(1), node(2)
	if _, err := n1.c.List(ctx, "", nil); err != nil {
		t.Fatalf("list through n1 before the partition: %v", err)
	}
	if err := partition(n1); err != nil {
		t.Fatal(err)
	}
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = heal(n1)
		}
	})
	cut := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	_, err := n1.c.List(cctx, "", nil)
	cancel()
	first := time.Since(cut)
	if err == nil {
		t.Fatalf("n1 answered a list %s after it was cut off from PostgreSQL", first.Round(time.Millisecond))
	}
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("cut off from PostgreSQL n1 answered %v; want 503 unavailable", err)
	}
	if bound := stale + 2*heartbeat; first > bound {
		t.Fatalf("the request in flight at the cut failed %s after it, past --node-stale %s + 2 heartbeats (%s): it waited on the store instead of ending when n1 turned stale (%v)", first.Round(time.Millisecond), stale, bound, err)
	}
	t.Logf("partition: the request in flight at the cut failed %s after it: %v", first.Round(time.Millisecond), err)
	t0 := time.Now()
	if _, err := n1.c.List(ctx, "", nil); !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("a list through the stale n1: %v; want 503 unavailable", err)
	}
	t.Logf("partition: the next list refused in %s", time.Since(t0).Round(time.Millisecond))
	// A create refused now must leave nothing behind.
	t0 = time.Now()
	cctx, cancel = context.WithTimeout(ctx, 40*time.Second)
	_, err = n1.c.Create(cctx, api.CreateSandboxRequest{Name: "cl-part-refused", Instance: "lite"})
	cancel()
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("create through the cut-off n1: %v; want 503 unavailable", err)
	}
	t.Logf("partition: a create through n1 refused in %s: %v", time.Since(t0).Round(time.Millisecond), err)
	if _, err := n2.c.List(ctx, "", nil); err != nil {
		t.Fatalf("n2 (not cut off) must keep working: %v", err)
	}

	if err := heal(n1); err != nil {
		t.Fatal(err)
	}
	healed = true
	healAt := time.Now()
	if err := waitFor(60*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := n1.c.List(cctx, "", nil)
		return err
	}); err != nil {
		t.Fatalf("n1 did not come back after the partition healed: %v", err)
	}
	t.Logf("partition: n1 answers again %s after the heal", time.Since(healAt).Round(time.Millisecond))
	if _, err := readRecord(ctx, "cl-part-refused"); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("the create refused during the partition left a record (%v)", err)
	}
	// And it takes work again.
	if err := waitFor(30*time.Second, func() error { return nodeHealth(n2, "n1", api.NodeAlive) }); err != nil {
		t.Fatalf("n1 is not alive again in n2's list: %v", err)
	}
	sb := create(t, n1, api.CreateSandboxRequest{Name: "cl-part-after", Instance: "lite"})
	if res := execVia(t, n1, sb.Name, "echo -n ok"); res.Stdout != "ok" {
		t.Fatalf("exec after the heal: %+v", res)
	}
}

//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

// staleMark is what the sandbox's first container holds in its /dev/shm (a
// tmpfs: never persisted, so no later container of the sandbox has it).
const staleMark = "stale-container"

// fenceScene puts a sandbox on node 2, marks its container, stops node 2
// past the stale bound, lets node 1 take the sandbox over, and continues
// node 2. It returns the sandbox, its container id and its record after
// the takeover.
func fenceScene(t *testing.T, prefix string) (api.Sandbox, record) {
	t.Helper()
	ctx := context.Background()
	n1, n2 := node(1), node(2)
	sb := createOn(t, n2, prefix, api.CreateSandboxRequest{Instance: "lite"})
	if res := execVia(t, n2, sb.Name, "echo -n "+staleMark+" > /dev/shm/mark"); res.ExitCode != 0 {
		t.Fatalf("mark the container: %+v", res)
	}
	ids, err := containers(n2)
	if err != nil || !slices.Contains(ids, sb.ID) {
		t.Fatalf("n2's runc lists %v (%v), not the sandbox's container %s: the probe would see nothing", ids, err, sb.ID)
	}
	before, err := readRecord(ctx, sb.Name)
	if err != nil || before.Owner != "n2" {
		t.Fatalf("record before: %+v %v; want owned by n2", before, err)
	}

	if err := n2.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = n2.signal(syscall.SIGCONT) })
	if err := waitFor(4*stale, func() error { return nodeHealth(n1, "n2", api.NodeStale) }); err != nil {
		t.Fatalf("n1 never saw the stopped n2 as stale: %v", err)
	}
	// The next request through n1 takes the sandbox over.
	var res api.ExecResult
	err = waitFor(60*time.Second, func() error {
		var err error
		res, err = n1.c.Exec(ctx, sb.Name, api.ExecRequest{Command: "cat /dev/shm/mark 2>/dev/null || echo -n fresh", TimeoutMs: 30000})
		return err
	})
	if err != nil {
		t.Fatalf("no answer through n1 for %s while n2 is stopped: %v", sb.Name, err)
	}
	if res.Stdout == staleMark {
		t.Fatalf("through n1 the stopped n2's container answered (%q): nothing took the sandbox over", res.Stdout)
	}
	moved, err := readRecord(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if moved.Owner == "n2" || moved.OwnerEpoch <= before.OwnerEpoch {
		t.Fatalf("record after the takeover: %+v (before %+v); want a new owner and a higher epoch", moved, before)
	}
	t.Logf("%s: n2 stopped %s; taken over by %s (epoch %d → %d)", sb.Name, time.Since(stopped).Round(time.Millisecond),
		moved.Owner, before.OwnerEpoch, moved.OwnerEpoch)
	if err := n2.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return sb, moved
}

// nodeHealth checks that via lists node name with health want.
func nodeHealth(via *clusterNode, name, want string) error {
	list, err := via.c.ListNodes(context.Background())
	if err != nil {
		return err
	}
	for _, n := range list.Nodes {
		if n.Name == name {
			if n.Health != want {
				return fmt.Errorf("%s is %s (heartbeat %d ms ago)", name, n.Health, n.HeartbeatAgeMs)
			}
			return nil
		}
	}
	return fmt.Errorf("%s not listed", name)
}

// doubleOwner watches node 2 for window after it came back and says how it
// acted as the owner of a sandbox it lost, or "" if it never did: it
// answered a request from its stale container, it wrote the record's owner
// or epoch, or its stale container still exists at the end. It also
// returns when the container went (0: it did not).
func doubleOwner(t *testing.T, sb api.Sandbox, moved record, window time.Duration) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	n2 := node(2)
	start := time.Now()
	var gone time.Duration
	var served []string
	for time.Since(start) < window {
		res, err := n2.c.Exec(ctx, sb.Name, api.ExecRequest{Command: "cat /dev/shm/mark 2>/dev/null || echo -n fresh", TimeoutMs: 10000})
		switch {
		case err == nil && res.Stdout == staleMark:
			return fmt.Sprintf("n2 served %s from its stale container %s after %s", sb.Name, time.Since(start).Round(time.Millisecond), sb.ID), gone
		case err == nil:
			served = append(served, "forwarded")
		default:
			served = append(served, err.Error())
		}
		if rec, err := readRecord(ctx, sb.Name); err == nil && (rec.Owner != moved.Owner || rec.OwnerEpoch != moved.OwnerEpoch) {
			return fmt.Sprintf("the record changed owner or epoch to %+v (the taker left %+v)", rec, moved), gone
		}
		if ids, err := containers(n2); err == nil && !slices.Contains(ids, sb.ID) && gone == 0 {
			gone = time.Since(start)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("requests through n2 after it came back: %s", summarize(served))
	if gone == 0 {
		return fmt.Sprintf("n2's stale container %s still exists %s after SIGCONT", sb.ID, window), 0
	}
	return "", gone
}

// summarize counts repeated strings: "forwarded ×12, <error> ×2".
func summarize(xs []string) string {
	var order []string
	count := map[string]int{}
	for _, x := range xs {
		if count[x] == 0 {
			order = append(order, x)
		}
		count[x]++
	}
	parts := make([]string, len(order))
	for i, x := range order {
		parts[i] = fmt.Sprintf("%s ×%d", x, count[x])
	}
	return strings.Join(parts, ", ")
}

// fenceWindow is how long node 2 is watched after SIGCONT: ten heartbeats.
const fenceWindow = 10 * heartbeat

// TestFencing: node 2, stopped past its lease while the cluster moved its
// sandbox, comes back and must not act as the owner: requests through it
// are forwarded to the new owner or refused, never served from its stale
// container; it does not write the record's owner or epoch; and it removes
// the stale container within a few heartbeats.
func TestFencing(t *testing.T) {
	sb, moved := fenceScene(t, "cl-fence")
	violation, gone := doubleOwner(t, sb, moved, fenceWindow)
	if violation != "" {
		t.Fatal(violation)
	}
	t.Logf("fencing: n2 removed its stale container %s %s after SIGCONT", sb.ID, gone.Round(time.Millisecond))
}

// TestFencingNegativeControl: with fencing weakened on node 2 the same
// scene must be caught by the double-owner probe, or the probe proves
// nothing.
func TestFencingNegativeControl(t *testing.T) {
	n2 := node(2)
	n2.d.Stop()
	restartOnCleanup(t, n2) // plain again: it fences what the weakened run left
	if err := n2.start([]string{weaken.EnvVar + "=" + weaken.Fencing}); err != nil {
		t.Fatal(err)
	}
	sb, moved := fenceScene(t, "cl-fenceneg")
	violation, _ := doubleOwner(t, sb, moved, fenceWindow)
	if violation == "" {
		t.Fatal("with fencing off on n2 the double-owner probe found nothing: it cannot tell fencing from its absence")
	}
	t.Logf("negative control caught: %s", violation)
}

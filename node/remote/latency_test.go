package remote_test

import (
	"context"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
)

// trivialNode is a fake whose every exec has already exited: timing it
// measures the path to the node and back, nothing else.
func trivialNode(tb testing.TB) *nodetest.Fake {
	fake := nodetest.NewFake(tb, nil)
	fake.ExecFunc = func(context.Context, string, []string, node.ExecOptions) (node.Process, error) {
		return nodetest.Done(0, "ok\n"), nil
	}
	if err := fake.Start(context.Background(), "bench", node.StartOptions{}); err != nil {
		tb.Fatal(err)
	}
	return fake
}

// execOnce is one exec as the control plane does it: start, read the
// output, wait for the code.
func execOnce(tb testing.TB, n node.Node, name string, argv []string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	p, err := n.Exec(ctx, name, argv, node.ExecOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, p.Stdout()); err != nil {
		tb.Fatal(err)
	}
	if code, err := p.Wait(ctx); err != nil || code != 0 {
		tb.Fatalf("exec %v: %d, %v", argv, code, err)
	}
	return time.Since(start)
}

// latency is an exec's p50 and p90.
type latency struct{ p50, p90 time.Duration }

func latencyOf(d []time.Duration) latency {
	slices.Sort(d)
	return latency{d[len(d)/2], d[len(d)*9/10]}
}

// ExecLatency measures execs on n in-process and through remote over
// loopback, interleaved so both see the same load, and returns both.
func ExecLatency(tb testing.TB, n node.Node, name string, argv []string, rounds int) (local, remote latency) {
	c, _ := serve(tb, n)
	for range 20 { // warm the connection pool
		execOnce(tb, c, name, argv)
	}
	var l, r []time.Duration
	for range rounds {
		l = append(l, execOnce(tb, n, name, argv))
		r = append(r, execOnce(tb, c, name, argv))
	}
	return latencyOf(l), latencyOf(r)
}

// hostNode is the fake with its own execs: real host processes, whose
// exit comes while the request waits (as on a real node), unlike
// trivialNode's, which have exited before Exec returns.
func hostNode(tb testing.TB) *nodetest.Fake {
	fake := nodetest.NewFake(tb, nil)
	if err := fake.Start(context.Background(), "bench", node.StartOptions{}); err != nil {
		tb.Fatal(err)
	}
	return fake
}

// TestExecLatency reports what the remote transport adds to an exec
// (issue 13's target: at most 0.5 ms p50 on loopback), for execs that have
// exited at once (the transport alone) and for host processes. The strict
// check runs with BERTH_LATENCY_STRICT=1 (a loaded CI machine is not a
// measurement); by default only a gross regression (5 ms) fails.
func TestExecLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	limit := 5 * time.Millisecond
	if os.Getenv("BERTH_LATENCY_STRICT") == "1" {
		limit = 500 * time.Microsecond
	}
	for _, c := range []struct {
		name   string
		n      node.Node
		rounds int
	}{{"exited", trivialNode(t), 2000}, {"host process", hostNode(t), 300}} {
		local, rem := ExecLatency(t, c.n, "bench", []string{"true"}, c.rounds)
		added := rem.p50 - local.p50
		t.Logf("%s: in-process p50 %v p90 %v, remote over loopback p50 %v p90 %v; added p50 %v (target ≤ 500µs)",
			c.name, local.p50, local.p90, rem.p50, rem.p90, added)
		if added > limit {
			t.Errorf("%s: remote exec adds %v p50 over in-process, limit %v", c.name, added, limit)
		}
	}
}

func BenchmarkExec(b *testing.B) {
	fake := trivialNode(b)
	c, _ := serve(b, fake)
	for _, bc := range []struct {
		name string
		n    node.Node
	}{{"inprocess", fake}, {"remote", c}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				execOnce(b, bc.n, "bench", []string{"true"})
			}
		})
	}
}

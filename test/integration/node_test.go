//go:build integration

package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/daemon"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/node/remote"
)

// TestNodeConformance runs the node.Node conformance suite against this
// machine's real node, in-process and through node/remote over loopback.
// The node is wired by daemon.OpenNode, the same wiring as `berth serve`,
// and takes the harness daemon's place for the test (same data dir, run
// dir, bridge, subnet and user namespace base); the daemon restarts after.
func TestNodeConformance(t *testing.T) {
	d.stop()
	t.Cleanup(func() {
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the harness daemon: %v", err)
		}
	})
	cfg := daemon.Config{
		DataDir: dataDir, RunDir: itRunDir, Bridge: itBridge, Subnet: itSubnet, AlarmTick: 200 * time.Millisecond,
		UserNSBase:       uint32(1<<29 + int(itIDDigit()[0]-'0')<<24),
		Runtime:          filepath.Join(binDir, "runc"),
		AgentBinary:      filepath.Join(binDir, "berth-agent"),
		DefaultIsolation: os.Getenv("BERTH_IT_ISOLATION"),
	}
	n, stop, err := daemon.OpenNode(context.Background(), cfg)
	if err != nil {
		t.Fatalf("OpenNode: %v", err)
	}
	t.Cleanup(stop)
	const token = "it-cluster-credential"
	srv := httptest.NewUnstartedServer(remote.NewHandler(n, token))
	var conns atomic.Int64 // connections the node accepted
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	rn := remote.NewClient(srv.URL, token, nil)

	t.Run("InProcess", func(t *testing.T) {
		nodetest.Run(t, func(*testing.T) node.Node { return n })
	})
	t.Run("Remote", func(t *testing.T) {
		nodetest.Run(t, func(*testing.T) node.Node { return rn })
	})
	t.Run("ExecLatency", func(t *testing.T) {
		ctx := context.Background()
		const name = "it-node-latency"
		if err := n.Start(ctx, name, node.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Destroy(context.Background(), name, "test") })
		before := conns.Load()
		local, rem := execTimes(t, n, rn, name, 200)
		t.Logf("exec `true` on the real node: in-process p50 %v p90 %v, remote over loopback p50 %v p90 %v; added p50 %v (target ≤ 500µs); %d new connections for %d remote execs",
			local.p50, local.p90, rem.p50, rem.p90, rem.p50-local.p50, conns.Load()-before, 210)
		if rem.p50-local.p50 > 5*time.Millisecond {
			t.Errorf("remote adds %v p50 over in-process", rem.p50-local.p50)
		}
	})
}

type percentiles struct{ p50, p90 time.Duration }

func percentilesOf(d []time.Duration) percentiles {
	slices.Sort(d)
	return percentiles{d[len(d)/2], d[len(d)*9/10]}
}

// execTimes runs `true` on both, interleaved (10 warm-up rounds, then
// rounds measured), and returns each one's p50 and p90.
func execTimes(t *testing.T, local, rem node.Node, name string, rounds int) (percentiles, percentiles) {
	once := func(n node.Node) time.Duration {
		ctx := context.Background()
		start := time.Now()
		p, err := n.Exec(ctx, name, []string{"true"}, node.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, p.Stdout())
		if code, err := p.Wait(ctx); err != nil || code != 0 {
			t.Fatalf("exec true: %d, %v", code, err)
		}
		return time.Since(start)
	}
	for range 10 {
		once(local)
		once(rem)
	}
	var l, r []time.Duration
	for range rounds {
		l = append(l, once(local))
		r = append(r, once(rem))
	}
	return percentilesOf(l), percentilesOf(r)
}

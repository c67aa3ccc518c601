//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestBenchCluster runs `berth bench --cluster` over the three API URLs
// once, with the single-host baseline (--single: a berth serve outside the
// cluster in a namespace of its own, so its requests cross the same kind
// of interface), and logs its JSON: figures only, never a timing
// assertion. It asserts only that the run worked and that its report
// carries every field. $BERTH_CL_BENCH_N sets the samples (default 10).
func TestBenchCluster(t *testing.T) {
	var urls []string
	for _, n := range cluster[1:] {
		urls = append(urls, "http://"+n.addr+":7070")
	}
	single := "http://" + startAlone(t).addr + ":7070"
	n := "10"
	if v := os.Getenv("BERTH_CL_BENCH_N"); v != "" {
		n = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "berth"), "bench", "--cluster", strings.Join(urls, ","), "--single", single, "--n", n, "--json")
	cmd.Env = append(os.Environ(), "BERTH_URL=", "BERTH_API_KEY="+apiKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	t.Logf("berth bench --cluster %s --single %s --n %s --json (%s):\n%s", strings.Join(urls, ","), single, n, time.Since(t0).Round(time.Millisecond), stdout.String())
	if err != nil {
		t.Fatalf("berth bench: %v\n%s", err, stderr.String())
	}
	var rep map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v", err)
	}
	for _, k := range []string{"nodes", "exec_same_node_ms", "exec_cross_node_ms", "exec_added_p50_ms", "tti_same_node_ms",
		"tti_cross_node_ms", "tti_cross_vs_same", "creates_per_sec", "burst", "placed", "instance"} {
		if v, ok := rep[k]; !ok || v == nil {
			t.Errorf("the report has no %q: %s", k, stdout.String())
		}
	}
	if nodes, _ := rep["nodes"].([]any); len(nodes) != 3 {
		t.Errorf("the report names %d nodes, want 3: %v", len(nodes), rep["nodes"])
	}
	alone, _ := rep["single_host"].(map[string]any)
	for _, k := range []string{"exec_ms", "tti_ms", "creates_per_sec", "exec_cross_added_p50_ms", "tti_cross_vs_single"} {
		if v, ok := alone[k]; !ok || v == nil {
			t.Errorf("the report's single_host has no %q: %s", k, stdout.String())
		}
	}
}

// TestRouteCacheAB measures what the forwarder's route caches save on a
// cross-node exec: `true` through the node that runs the sandbox and
// through another, interleaved, with every node started with
// --route-owner-cache 0 --route-node-cache 0 (the entry reads the record,
// the owner's entry and the store's clock on every request, as before the
// caches) and with the defaults, in alternating rounds. Figures only,
// never a timing assertion (it asserts only that every exec answered).
// Opt-in: BERTH_CL_ROUTE_AB=ROUNDS (each round restarts every node
// twice); BERTH_CL_ROUTE_AB_N execs per path and round (default 200).
func TestRouteCacheAB(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("BERTH_CL_ROUTE_AB"))
	if rounds <= 0 {
		t.Skip("opt-in: BERTH_CL_ROUTE_AB=ROUNDS")
	}
	per := 200
	if v, err := strconv.Atoi(os.Getenv("BERTH_CL_ROUTE_AB_N")); err == nil && v > 0 {
		per = v
	}
	ctx := context.Background()
	n1, n2 := node(1), node(2)
	sb := createOn(t, n2, "cl-routeab", api.CreateSandboxRequest{Instance: "lite"})
	restartAll := func(args ...string) {
		t.Helper()
		for _, n := range cluster[1:] {
			n.d.Stop()
			if err := n.start(nil, args...); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range cluster[1:] {
			if err := waitFor(4*stale, func() error { return allAlive(n) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, n := range cluster[1:] {
			if n.alive() {
				n.d.Stop()
			}
			if err := n.start(nil); err != nil {
				t.Errorf("restart %s: %v", n.name, err)
			}
		}
	})
	configs := []struct {
		name string
		args []string
	}{
		{"uncached", []string{"--route-owner-cache", "0", "--route-node-cache", "0"}},
		{"cached", nil},
	}
	same := map[string][]time.Duration{}
	cross := map[string][]time.Duration{}
	timedExec := func(via *clusterNode) time.Duration {
		t.Helper()
		t0 := time.Now()
		res, err := via.c.Exec(ctx, sb.Name, api.ExecRequest{Argv: []string{"true"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec true through %s: %+v %v", via.name, res, err)
		}
		return d
	}
	for r := 0; r < rounds; r++ {
		for _, c := range configs {
			restartAll(c.args...)
			for range 10 { // warm-up: connections, the caches
				timedExec(n2)
				timedExec(n1)
			}
			from := time.Now().UTC()
			for range per {
				same[c.name] = append(same[c.name], timedExec(n2))
				cross[c.name] = append(cross[c.name], timedExec(n1))
			}
			// The window, to match the nodes' request log lines to it.
			t.Logf("round %d %s: %s .. %s", r, c.name, from.Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
		}
	}
	p50 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[(len(s)-1)/2]
	}
	for _, c := range configs {
		s, x := p50(same[c.name]), p50(cross[c.name])
		t.Logf("route caches %s: exec true p50 same node %s, cross node %s, cross-node cost %+.3f ms (%d rounds × %d each)",
			c.name, s.Round(time.Microsecond), x.Round(time.Microsecond), float64(x-s)/1e6, rounds, per)
	}
}

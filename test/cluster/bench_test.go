//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchCluster runs `berth bench --cluster` over the three API URLs
// once and logs its JSON: figures only, never a timing assertion. It
// asserts only that the run worked and that its report carries every field.
func TestBenchCluster(t *testing.T) {
	var urls []string
	for _, n := range cluster[1:] {
		urls = append(urls, "http://"+n.addr+":7070")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "berth"), "bench", "--cluster", strings.Join(urls, ","), "--n", "10", "--json")
	cmd.Env = append(os.Environ(), "BERTH_URL=", "BERTH_API_KEY="+apiKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	t.Logf("berth bench --cluster %s --n 10 --json (%s):\n%s", strings.Join(urls, ","), time.Since(t0).Round(time.Millisecond), stdout.String())
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
}

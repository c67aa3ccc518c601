//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// berthCLI runs the berth CLI against the suite's daemon (it finds it
// through <data>/client.json, as a user's shell would).
func berthCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "berth"), append([]string{"--data", dataDir}, args...)...)
	cmd.Env = append(os.Environ(), "BERTH_URL=", "BERTH_API_KEY=")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("berth %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// TestNodeMembership: the running daemon lists itself as one alive node
// with capacity, the base image's digest once a sandbox used it, its
// isolation and its sandbox; `berth sandbox ls` names that node; drain and
// undrain round-trip through the CLI and survive heartbeats.
func TestNodeMembership(t *testing.T) {
	ctx := context.Background()
	imgs, err := d.c.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var base string
	for _, i := range imgs {
		if i.Name == "debian-trixie" {
			base = i.Digest
		}
	}
	if base == "" {
		t.Fatalf("no debian-trixie image: %+v", imgs)
	}
	sb := sandbox(t, api.CreateSandboxRequest{Name: "members-a"})
	host, _ := os.Hostname()
	want := strings.ToLower(host)
	if sb.Node != want {
		t.Fatalf("sandbox's node %q, want the host's %q", sb.Node, want)
	}

	// The entry is rewritten every 2 s: wait for one that has seen the
	// sandbox.
	var n api.Node
	deadline := time.Now().Add(15 * time.Second)
	for {
		var list api.NodeList
		out := berthCLI(t, "node", "ls", "--json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("node ls --json: %v\n%s", err, out)
		}
		if len(list.Nodes) != 1 {
			t.Fatalf("want one node, got %+v", list.Nodes)
		}
		n = list.Nodes[0]
		if slices.Contains(n.Images, base) && n.Committed.MilliCPU > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node never reported the base image %s and the running sandbox: %+v", base, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n.Name != want || n.Health != api.NodeAlive || n.Capacity.MilliCPU <= 0 || n.Capacity.MemoryBytes <= 0 || n.Capacity.DiskBytes <= 0 ||
		n.Sandboxes < 1 || n.Epoch < 1 || !slices.Contains(n.Isolation, api.IsolationRunc) || len(n.Roles) != 2 || n.HeartbeatAgeMs > 10000 {
		t.Fatalf("node entry %+v", n)
	}
	t.Logf("node %s: %d mCPU, %d MiB, heartbeat %d ms ago, epoch %d, isolation %v", n.Name, n.Capacity.MilliCPU, n.Capacity.MemoryBytes>>20, n.HeartbeatAgeMs, n.Epoch, n.Isolation)

	table := berthCLI(t, "node", "ls")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], want+" ") || !strings.Contains(lines[1], "alive") {
		t.Fatalf("node ls table:\n%s", table)
	}
	sbls := berthCLI(t, "sandbox", "ls")
	found := false
	for _, line := range strings.Split(sbls, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[0] == "members-a" && f[4] == want {
			found = true
		}
	}
	if !found {
		t.Fatalf("sandbox ls does not name the node:\n%s", sbls)
	}

	// Drain: the flag is set and survives the next heartbeats.
	if out := berthCLI(t, "node", "drain", want); !strings.Contains(out, "draining") {
		t.Fatalf("drain: %q", out)
	}
	t.Cleanup(func() { _, _ = d.c.UndrainNode(context.Background(), want) })
	before := n.Heartbeat
	deadline = time.Now().Add(15 * time.Second)
	for {
		if err := json.Unmarshal([]byte(berthCLI(t, "node", "show", want)), &n); err != nil {
			t.Fatal(err)
		}
		if !n.Draining {
			t.Fatalf("a heartbeat cleared draining: %+v", n)
		}
		if n.Heartbeat.After(before) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat after the drain: %+v", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := berthCLI(t, "node", "undrain", want); !strings.Contains(out, "takes new sandboxes") {
		t.Fatalf("undrain: %q", out)
	}
	if got, err := d.c.GetNode(ctx, want); err != nil || got.Draining {
		t.Fatalf("after undrain: %+v %v", got, err)
	}
}

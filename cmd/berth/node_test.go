package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/control/membership"
	"github.com/berth-sh/berth/daemon"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/server"
	"github.com/berth-sh/berth/store/sqlite"
)

type nodeInfo node.Info

func (i nodeInfo) Info(context.Context) (node.Info, error) { return node.Info(i), nil }

// listed is a backend whose inventory is two sandboxes, one with a node.
type listed struct{ control.Backend }

func (listed) List(context.Context, control.ListFilter) ([]api.Sandbox, error) {
	return []api.Sandbox{{Name: "a", State: "running", Node: "worker-1"}, {Name: "b", State: "sleeping"}}, nil
}

// nodeCLI serves the real membership over SQLite with one entry,
// worker-1, and runs the CLI against it.
func nodeCLI(t *testing.T) (*cli, *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := membership.New(st, nodeInfo{
		Capacity:           node.Capacity{VCPU: 2, MemoryMiB: 4096, DiskMB: 64000, UsedVCPU: 0.5, UsedMemoryMiB: 1024},
		Images:             []string{"sha256:base"},
		SnapshotLayers:     []string{"sha256:aa"},
		SnapshotLayerBytes: map[string]int64{"sha256:aa": 2500000},
		Isolation:          []string{api.IsolationRunc},
	}, membership.Config{Name: "worker-1", Labels: map[string]string{"zone": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(listed{}, server.Options{APIKey: "k", Nodes: membership.NewDirectory(st, nil, "worker-1", 0)}))
	t.Cleanup(ts.Close)
	return &cli{t: t, url: ts.URL}, st
}

func TestNodeLs(t *testing.T) {
	c, _ := nodeCLI(t)
	code, out, errs := c.run("", "node", "ls")
	if code != 0 {
		t.Fatalf("node ls: %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("table %q", out)
	}
	head := strings.Fields(lines[0])
	want := "NAME ADDR ROLES HEALTH CPU MEM DISK SANDBOXES RUNNING SLEEPING IMAGES LAYERS DRAINING HEARTBEAT"
	if strings.Join(head, " ") != want {
		t.Fatalf("header %q, want %q", lines[0], want)
	}
	row := strings.Fields(lines[1])
	// NAME ADDR ROLES HEALTH CPU MEM DISK SANDBOXES RUNNING SLEEPING IMAGES LAYERS(2 fields) DRAINING HEARTBEAT(2 fields)
	if len(row) < 15 || row[0] != "worker-1" || row[1] != "-" || row[2] != "control,node" || row[3] != "alive" ||
		row[4] != "0.5/2" || row[5] != "1.1GB/4.3GB" || row[6] != "0/64.0GB" || row[7] != "0" || row[8] != "0" ||
		row[9] != "0" || row[10] != "1" || row[11] != "1" || row[12] != "(2.5" || row[14] != "no" {
		t.Fatalf("row %q", lines[1])
	}
	code, out, errs = c.run("", "node", "ls", "--json")
	var list api.NodeList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Nodes) != 1 || list.Nodes[0].Labels["zone"] != "a" ||
		list.Nodes[0].Images[0] != "sha256:base" || list.Nodes[0].Layers["aa"] != 2500000 {
		t.Fatalf("--json: %d %q %s", code, out, errs)
	}
}

func TestNodeShowDrainUndrain(t *testing.T) {
	c, st := nodeCLI(t)
	code, out, errs := c.run("", "node", "show", "worker-1")
	var n api.Node
	if code != 0 || json.Unmarshal([]byte(out), &n) != nil || n.Name != "worker-1" || n.Epoch != 1 {
		t.Fatalf("show: %d %q %s", code, out, errs)
	}
	if code, out, errs := c.run("", "node", "drain", "worker-1"); code != 0 || !strings.Contains(out, "draining") {
		t.Fatalf("drain: %d %q %s", code, out, errs)
	}
	if got, _ := st.GetNode(context.Background(), "worker-1"); !got.Draining {
		t.Fatal("drain did not reach the store")
	}
	if code, out, errs := c.run("", "node", "undrain", "worker-1"); code != 0 || !strings.Contains(out, "takes new sandboxes") {
		t.Fatalf("undrain: %d %q %s", code, out, errs)
	}
	if got, _ := st.GetNode(context.Background(), "worker-1"); got.Draining {
		t.Fatal("undrain did not reach the store")
	}
	if code, _, errs := c.run("", "node", "show", "nope"); code != 1 || !strings.Contains(errs, `"nope" is not a member`) {
		t.Fatalf("show unknown: %d %s", code, errs)
	}
	if code, _, errs := c.run("", "node", "drain", "nope"); code != 1 || !strings.Contains(errs, `"nope"`) {
		t.Fatalf("drain unknown: %d %s", code, errs)
	}
}

func TestSandboxLsShowsNode(t *testing.T) {
	c, _ := nodeCLI(t)
	code, out, errs := c.run("", "sandbox", "ls")
	if code != 0 {
		t.Fatalf("ls: %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Fields(lines[0])[4] != "NODE" || strings.Fields(lines[1])[4] != "worker-1" || strings.Fields(lines[2])[4] != "-" {
		t.Fatalf("table %q", out)
	}
}

func TestServeNodeFlags(t *testing.T) {
	var got daemon.Config
	runDaemon = func(ctx context.Context, cfg daemon.Config) error { got = cfg; return nil }
	t.Cleanup(func() { runDaemon = daemon.Run })
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "--node-name", "w1", "--role", "node", "--node-label", "zone=a", "--node-label", "gpu=1",
		"--node-heartbeat", "1s", "--node-stale", "5s"}, strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("serve: %d %s", code, errb.String())
	}
	n := got.Member
	if n.Name != "w1" || n.Role != "node" || strings.Join(n.Labels, ",") != "zone=a,gpu=1" || n.Beat.Seconds() != 1 || n.Stale.Seconds() != 5 {
		t.Fatalf("node config %+v", n)
	}
}

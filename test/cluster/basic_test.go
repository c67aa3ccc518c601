//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestNodes: every node lists the three nodes, alive, each with the node
// API address it was given, and a sandbox created through each node takes
// an exec there.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	for _, via := range cluster[1:] {
		var list api.NodeList
		err := waitFor(3*stale, func() error {
			var err error
			if list, err = via.c.ListNodes(ctx); err != nil {
				return err
			}
			alive := 0
			for _, n := range list.Nodes {
				if n.Health == api.NodeAlive {
					alive++
				}
			}
			if alive != nodes {
				return fmt.Errorf("%d alive of %d listed: %+v", alive, len(list.Nodes), list.Nodes)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("GET /v1/nodes through %s: %v", via.name, err)
		}
		if len(list.Nodes) != nodes {
			t.Fatalf("through %s: %d nodes listed, want %d: %+v", via.name, len(list.Nodes), nodes, list.Nodes)
		}
		for _, n := range list.Nodes {
			want := byName(n.Name)
			if want == nil {
				t.Fatalf("through %s: unknown node %q", via.name, n.Name)
			}
			if !strings.Contains(n.Addr, want.addr+":7071") {
				t.Errorf("through %s: node %s has address %q, want its node listener %s:7071", via.name, n.Name, n.Addr, want.addr)
			}
			if n.Epoch < 1 {
				t.Errorf("through %s: node %s has epoch %d", via.name, n.Name, n.Epoch)
			}
		}
	}
	for _, via := range cluster[1:] {
		name := "cl-nodes-" + via.name
		t0 := time.Now()
		sb := create(t, via, api.CreateSandboxRequest{Name: name, Instance: "lite"})
		tti := time.Since(t0)
		res := execVia(t, via, name, "echo hello from $(hostname)")
		if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "hello from") {
			t.Fatalf("exec in %s through %s: %+v", name, via.name, res)
		}
		t.Logf("%s: created through %s, runs on %q, create+start %s", name, via.name, sb.Node, tti.Round(time.Millisecond))
	}
}

// TestSpread: twelve small sandboxes created through node 1 land on all
// three nodes (each says where in GET), and every one takes an exec and a
// file written through one node and read back through another, through
// every node.
func TestSpread(t *testing.T) {
	const count = 12
	ctx := context.Background()
	on := map[string][]string{}
	t0 := time.Now()
	for k := range count {
		name := fmt.Sprintf("cl-spread-%02d", k)
		create(t, node(1), api.CreateSandboxRequest{Name: name, Instance: "lite"})
		sb, err := node(1).c.Get(ctx, name)
		if err != nil {
			t.Fatalf("get %s through n1: %v", name, err)
		}
		if byName(sb.Node) == nil {
			t.Fatalf("%s: GET names node %q, not one of the cluster's", name, sb.Node)
		}
		on[sb.Node] = append(on[sb.Node], name)
	}
	t.Logf("%d creates through n1 in %s; placement: n1 %d, n2 %d, n3 %d", count, time.Since(t0).Round(time.Millisecond),
		len(on["n1"]), len(on["n2"]), len(on["n3"]))
	for _, n := range cluster[1:] {
		if len(on[n.name]) == 0 {
			t.Errorf("no sandbox of %d created through n1 landed on %s: %v", count, n.name, on)
		}
	}
	t1 := time.Now()
	for k := range count {
		name := fmt.Sprintf("cl-spread-%02d", k)
		for _, via := range cluster[1:] {
			// The owner says where it runs, whichever node asked.
			sb, err := via.c.Get(ctx, name)
			if err != nil {
				t.Fatalf("get %s through %s: %v", name, via.name, err)
			}
			res := execVia(t, via, name, "echo -n $((6*7))")
			if res.ExitCode != 0 || res.Stdout != "42" {
				t.Fatalf("exec in %s (on %s) through %s: %+v", name, sb.Node, via.name, res)
			}
			// Written through via, read back through the next node.
			other := cluster[via.i%nodes+1]
			path := "/home/user/from-" + via.name
			body := []byte(strings.Repeat(name+" via "+via.name+"\n", 1000))
			if err := via.c.WriteFile(ctx, name, path, bytes.NewReader(body), 0o644); err != nil {
				t.Fatalf("write %s in %s (on %s) through %s: %v", path, name, sb.Node, via.name, err)
			}
			rc, err := other.c.ReadFile(ctx, name, path)
			if err != nil {
				t.Fatalf("read %s in %s (on %s) through %s: %v", path, name, sb.Node, other.name, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("read %s in %s (on %s) through %s: %d bytes (%v), want the %d written through %s",
					path, name, sb.Node, other.name, len(got), err, len(body), via.name)
			}
		}
	}
	t.Logf("exec, write and read of %d sandboxes through each of %d nodes in %s", count, nodes, time.Since(t1).Round(time.Millisecond))
}

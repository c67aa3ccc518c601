//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
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

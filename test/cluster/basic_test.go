//go:build cluster

package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

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

// TestSpread: thirty small sandboxes created through node 1 land on all
// three nodes (each says where in GET), and every one takes an exec and a
// file written through one node and read back through another, through
// every node. Every one also serves a PTY (the WebSocket terminal) and a
// preview URL (python3 -m http.server in the sandbox, fetched through
// every node's preview listener) through every node; spreadWorkers
// sandboxes at a time, since each waits mostly on its own python start
// under a lite sandbox's CPU share.
func TestSpread(t *testing.T) {
	const count = 30
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

	t2 := time.Now()
	names := make([]string, count)
	for k := range names {
		names[k] = fmt.Sprintf("cl-spread-%02d", k)
	}
	errs := make([]error, count)
	work := make(chan int)
	var wg sync.WaitGroup
	for range spreadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				errs[k] = ptyAndPreview(names[k])
			}
		}()
	}
	for k := range names {
		work <- k
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("PTY and preview of all %d sandboxes through each of %d nodes in %s (%d at a time)", count, nodes, time.Since(t2).Round(time.Millisecond), spreadWorkers)
}

// spreadWorkers is how many sandboxes TestSpread checks PTY and preview of
// at once.
const spreadWorkers = 10

// ptyAndPreview checks a PTY of sandbox name through every node, then its
// preview through every node.
func ptyAndPreview(name string) error {
	sb, err := node(1).c.Get(context.Background(), name)
	if err != nil {
		return fmt.Errorf("get %s through n1: %w", name, err)
	}
	for _, via := range cluster[1:] {
		if err := ptyVia(via, name, sb.Node); err != nil {
			return err
		}
	}
	return previewEverywhere(name, sb.Node)
}

// ptyVia opens a terminal of sandbox name through node via, runs a command
// on it and reads its output back, then deletes the terminal.
func ptyVia(via *clusterNode, name, on string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := "t-" + via.name
	conn, err := via.c.AttachTerminal(ctx, name, id, 80, 24)
	if err != nil {
		return fmt.Errorf("PTY of %s (on %s) through %s: %w", name, on, via.name, err)
	}
	defer conn.CloseNow()
	// The typed line does not hold the answer, so an echo of it does not
	// count: only the shell's output does.
	want := "pty-" + via.name + "-42"
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("echo pty-"+via.name+"-$((40+2))\n")); err != nil {
		return fmt.Errorf("PTY of %s (on %s) through %s: write: %w", name, on, via.name, err)
	}
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("PTY of %s (on %s) through %s: read (have %q): %w", name, on, via.name, got.String(), err)
		}
		if typ == websocket.MessageBinary {
			got.Write(b)
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")
	if err := via.c.DeleteTerminal(context.Background(), name, id); err != nil {
		return fmt.Errorf("delete terminal %s of %s through %s: %w", id, name, via.name, err)
	}
	return nil
}

// previewEverywhere serves a page from sandbox name (python3 -m
// http.server on 127.0.0.1:8000, reached only through the agent), exposes
// the port through node 1, and fetches the path-form preview URL through
// every node's preview listener. The first fetch waits for the server to
// listen (a lite sandbox's python takes seconds to start); polling from
// outside keeps the sandbox's small CPU share for the server.
func previewEverywhere(name, on string) error {
	ctx := context.Background()
	page := "preview of " + name
	res, err := node(1).c.Exec(ctx, name, api.ExecRequest{TimeoutMs: 60000, Command: "mkdir -p /home/user/site && echo '" + page + "' > /home/user/site/index.html && " +
		"cd /home/user/site && (nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &)"})
	if err != nil || res.ExitCode != 0 {
		return fmt.Errorf("start http.server in %s (on %s): %+v %v", name, on, res, err)
	}
	p, err := node(1).c.ExposePort(ctx, name, api.ExposePortRequest{Port: 8000})
	if err != nil {
		return fmt.Errorf("expose port 8000 of %s (on %s) through n1: %w", name, on, err)
	}
	u, err := url.Parse(p.PathURL)
	if err != nil || u.Path == "" {
		return fmt.Errorf("expose of %s: path URL %q: %v", name, p.PathURL, err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	fetch := func(via *clusterNode) error {
		target := "http://" + via.addr + ":7080" + u.RequestURI() + "index.html"
		res, err := hc.Get(target)
		if err != nil {
			return fmt.Errorf("preview of %s (on %s) through %s: %w", name, on, via.name, err)
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(b), page) {
			return fmt.Errorf("preview %s of %s (on %s) through %s: %s %q", target, name, on, via.name, res.Status, b)
		}
		return nil
	}
	if err := waitFor(60*time.Second, func() error { return fetch(node(1)) }); err != nil {
		return fmt.Errorf("the server in %s never answered: %w", name, err)
	}
	for _, via := range cluster[1:] {
		if err := fetch(via); err != nil {
			return err
		}
	}
	return nil
}

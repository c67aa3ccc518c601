//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/daemon"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/node/remote"
)

// TestNodeAPI runs `berth serve --node-listen` and drives the node it
// serves with node/remote's client as another berth process would: a
// sandbox's start, exec, agent and destroy, then the node conformance
// suite. Negative controls: the node port answers 401 to no token, a
// wrong one and the user API key, and 404 to a user API route; the user
// API answers 401 to the cluster token.
func TestNodeAPI(t *testing.T) {
	d.stop()
	nodeAddr := freePort()
	nd, err := startDaemon(nil, "--node-listen", nodeAddr)
	if err != nil {
		t.Fatalf("start a daemon with --node-listen: %v", err)
	}
	t.Cleanup(func() {
		nd.stop()
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the harness daemon: %v", err)
		}
	})
	tokPath := filepath.Join(dataDir, "cluster-token")
	st, err := os.Stat(tokPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cluster token file: %v, mode %v; want 0600", err, st.Mode())
	}
	tokB, _ := os.ReadFile(tokPath)
	token := strings.TrimSpace(string(tokB))
	var cc struct{ APIKey string }
	b, _ := os.ReadFile(filepath.Join(dataDir, "client.json"))
	if json.Unmarshal(b, &cc) != nil || cc.APIKey == "" || cc.APIKey == token {
		t.Fatalf("API key %q beside cluster token", cc.APIKey)
	}

	nodeURL := "http://" + nodeAddr
	status := func(base, path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		what, base, path, auth string
		want                   int
	}{
		{"node API, no token", nodeURL, remote.Prefix + "/info", "", 401},
		{"node API, wrong token", nodeURL, remote.Prefix + "/info", "x" + token, 401},
		{"node API, the user API key", nodeURL, remote.Prefix + "/info", cc.APIKey, 401},
		{"node API, cluster token", nodeURL, remote.Prefix + "/info", token, 200},
		{"user API route on the node port", nodeURL, "/v1/sandboxes", token, 404},
		{"user API, cluster token", "http://" + nd.listen, "/v1/sandboxes", token, 401},
		{"user API, its key", "http://" + nd.listen, "/v1/sandboxes", cc.APIKey, 200},
	} {
		if got := status(c.base, c.path, c.auth); got != c.want {
			t.Errorf("%s: HTTP %d, want %d", c.what, got, c.want)
		}
	}

	rn, err := daemon.Config{DataDir: dataDir}.NodeClient(nodeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Lifecycle", func(t *testing.T) {
		ctx := context.Background()
		const name = "it-node-api"
		if err := rn.Start(ctx, name, node.StartOptions{}); err != nil {
			t.Fatalf("Start through the node API: %v", err)
		}
		destroyed := false
		t.Cleanup(func() {
			if !destroyed {
				rn.Destroy(context.Background(), name, "test")
			}
		})
		p, err := rn.Exec(ctx, name, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, node.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		go io.Copy(&stderr, p.Stderr())
		out, _ := io.ReadAll(p.Stdout())
		if code, err := p.Wait(ctx); code != 3 || err != nil || string(out) != "out\n" {
			t.Fatalf("exec: code %d, %v, stdout %q", code, err, out)
		}
		ag, release, err := rn.Agent(ctx, name)
		if err != nil {
			t.Fatalf("Agent through the node API: %v", err)
		}
		if err := ag.WriteFile(ctx, "/tmp/through-node-api", strings.NewReader("tunnelled"), 0o644); err != nil {
			t.Fatalf("write a file through the agent tunnel: %v", err)
		}
		rc, err := ag.ReadFile(ctx, "/tmp/through-node-api")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		release()
		if string(got) != "tunnelled" {
			t.Fatalf("read back %q", got)
		}
		if err := rn.Destroy(ctx, name, "test"); err != nil {
			t.Fatalf("Destroy through the node API: %v", err)
		}
		destroyed = true
		if s, err := rn.Status(ctx, name); err != nil || s.Exists {
			t.Fatalf("after Destroy: %+v %v", s, err)
		}
	})
	t.Run("Conformance", func(t *testing.T) {
		nodetest.Run(t, func(*testing.T) node.Node { return rn })
	})
	logB, _ := os.ReadFile(nd.log.Name())
	if bytes.Contains(logB, []byte(token)) {
		t.Error("the daemon's log holds the cluster token")
	}
	if !bytes.Contains(logB, []byte("node API serving on "+nodeURL)) {
		t.Error("the daemon's log does not say where the node API serves")
	}
}

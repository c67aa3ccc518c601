//go:build cluster

package cluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestE2BSDKCrossNode: the real npm e2b SDK (test/compat's pinned
// install), pointed at node 2 only, drives a sandbox that runs on node 3:
// Sandbox.connect by its id, a command, a file written and read back. The
// sandbox is made on node 3 first through its native API, with the label
// that makes it an E2B sandbox (its berth name is its E2B id).
func TestE2BSDKCrossNode(t *testing.T) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: run scripts/deps.sh")
	}
	compat, _ := filepath.Abs("../compat")
	if _, err := os.Stat(filepath.Join(compat, "node_modules/e2b/package.json")); err != nil {
		t.Fatal("the E2B SDK is not installed: run (cd test/compat && npm ci)")
	}
	script, _ := filepath.Abs("testdata/e2b_crossnode.mjs")
	ctx := context.Background()
	n2, n3 := node(2), node(3)
	id := "clxnode" + randHex(7)[:13] // 20 of [a-z0-9]: an E2B sandbox id
	sb := createPinned(t, n3, api.CreateSandboxRequest{Name: id, Instance: "lite", Labels: map[string]string{"e2b.sandbox": "1"}})
	if res := execVia(t, n3, id, "echo -n 'written natively' > /home/user/native.txt"); res.ExitCode != 0 {
		t.Fatalf("write through n3: %+v", res)
	}

	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	url := "http://" + n2.addr + ":7070"
	cmd := exec.CommandContext(cctx, nodeBin, script)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_API_KEY=" + apiKey,
		"COMPAT_DIR=" + compat, "SANDBOX_ID=" + id,
	}
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("e2b SDK through n2 on %s (runs on %s), %s:\n%s", id, sb.Node, time.Since(t0).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the SDK script failed: %v", err)
	}
	if !strings.Contains(string(out), `"state":"running"`) {
		t.Fatalf("the SDK's getInfo through n2 does not say running: %s", out)
	}
	// What the SDK wrote through n2 is in the sandbox on n3, which did not
	// move.
	if res := execVia(t, n3, id, "cat /home/user/from-sdk.txt"); res.Stdout != "written by the e2b SDK" {
		t.Fatalf("through n3 the SDK's file reads %+v", res)
	}
	rec, err := readRecord(ctx, id)
	if err != nil || rec.Owner != "n3" {
		t.Fatalf("the record after the SDK run: %+v %v; want it still on n3", rec, err)
	}
}

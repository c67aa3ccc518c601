//go:build mcp

package mcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/testdaemon"
)

// The daemon gets its own bridge, subnet (10.19<ID>.0.0/16), run dir and
// user-namespace ids (BERTH_IT_ID picks a set, as in test/integration).
// Its data dir defaults to the integration suite's, so the base image is
// built once; the two never run at once.
var (
	itID    = os.Getenv("BERTH_IT_ID")
	bridge  = "berthmcp" + itID
	subnet  = "10.19" + testdaemon.SuiteDigit() + ".0.0/16"
	runDir  = "/run/berth-mcp" + itID
	dataDir = testdaemon.EnvOr("BERTH_MCP_DATA", "/var/tmp/berth-it"+itID)
)

func TestMCPClient(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (it starts berth serve)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: run scripts/deps.sh")
	}
	if _, err := os.Stat("node_modules/@modelcontextprotocol/sdk/package.json"); err != nil {
		t.Fatal("the MCP SDK is not installed: run (cd test/mcp && npm ci)")
	}
	bin := os.Getenv("BERTH_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin")
	}
	td, err := testdaemon.Start(testdaemon.Options{
		Bin: bin, Data: dataDir, RunDir: runDir, Bridge: bridge, Subnet: subnet,
		// Host ids disjoint from the other suites' (integration 1<<29,
		// adversarial 1<<30, compat 3<<29, cluster 7<<28; all below 2^31).
		UserNSBase: 3<<28 + uint32(testdaemon.SuiteDigit()[0]-'0')<<24,
		Log:        filepath.Join(os.TempDir(), "berth-mcp"+itID+"-daemon.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(td.Stop)
	url := "http://" + td.Listen
	c := client.New(url, td.APIKey)
	if err := testdaemon.EnsureBase(c, t.Logf); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sandbox := fmt.Sprintf("mcp-it-%d", os.Getpid())
	t.Cleanup(func() { _ = c.Destroy(ctx, sandbox) })

	scripts, _ := filepath.Glob("js/*.test.mjs")
	if len(scripts) == 0 {
		t.Fatal("no test scripts in js/")
	}
	for _, s := range scripts {
		t.Run(filepath.Base(s), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-force-exit", "--test-reporter=spec", s)
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
				"BERTH_MCP_BIN=" + filepath.Join(bin, "berth"),
				"BERTH_URL=" + url, "BERTH_API_KEY=" + td.APIKey, "SANDBOX=" + sandbox,
			}
			out, err := cmd.CombinedOutput()
			t.Logf("%s\n%s", s, out)
			if err != nil {
				t.Fatalf("%s failed: %v", s, err)
			}
		})
	}
	// The scripts destroyed the sandbox through MCP: berth agrees.
	if _, err := c.Get(ctx, sandbox); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Errorf("after sandbox_destroy over MCP, GET %s: %v; want not found", sandbox, err)
	}
}

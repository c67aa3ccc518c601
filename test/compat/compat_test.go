//go:build compat

package compat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testdaemon"
)

// The daemon gets its own bridge, subnet (10.17<ID>.0.0/16, 10.170 without
// an id) and run dir (BERTH_IT_ID picks a set, as in test/integration). Its data dir defaults to the integration
// suite's so the base image is built once; the two never run at once.
var (
	itID    = os.Getenv("BERTH_IT_ID")
	bridge  = "berthcp" + itID
	subnet  = "10.17" + testdaemon.SuiteDigit() + ".0.0/16"
	runDir  = "/run/berth-cp" + itID
	dataDir = testdaemon.EnvOr("BERTH_COMPAT_DATA", "/var/tmp/berth-it"+itID)
)

// startDaemon runs berth serve with extra flags and returns its URL and
// API key.
func startDaemon(t *testing.T, args ...string) (string, string) {
	bin := os.Getenv("BERTH_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin")
	}
	td, err := testdaemon.Start(testdaemon.Options{
		Bin: bin, Data: dataDir, RunDir: runDir, Bridge: bridge, Subnet: subnet,
		// Host ids disjoint from any other berth on this machine (the
		// integration and adversarial suites, a berth from up.sh).
		UserNSBase: 3<<29 + uint32(testdaemon.SuiteDigit()[0]-'0')<<24,
		Log:        filepath.Join(os.TempDir(), "berth-compat"+itID+"-daemon.log"),
		Args:       args,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(td.Stop)
	return "http://" + td.Listen, td.APIKey
}

func ensureBase(t *testing.T, c *client.Client) {
	if err := testdaemon.EnsureBase(c, t.Logf); err != nil {
		t.Fatal(err)
	}
}

func TestE2BSDK(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	url, key := startDaemon(t)
	runScripts(t, url, key, "js/*.test.mjs", nil)
	// The memory-keeping scripts under the default sleep mode (stop):
	// their negative control, pause() keeps files only.
	runScripts(t, url, key, "js/*.freeze.mjs", []string{"EXPECT_MEMORY=0"})
	fmt.Println("compat: done")
}

// TestE2BSDKFreeze runs the memory-keeping scripts against a daemon whose
// operator default sleep mode is freeze: pause() freezes, connect() thaws,
// processes and interpreter state continue.
func TestE2BSDKFreeze(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	url, key := startDaemon(t, "--sleep-mode", "freeze")
	runScripts(t, url, key, "js/*.freeze.mjs", []string{"EXPECT_MEMORY=1"})
}

// runScripts runs each node test script matching glob (and COMPAT_RUN)
// against the daemon at url, then checks that none left a sandbox.
func runScripts(t *testing.T, url, key, glob string, env []string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: run scripts/deps.sh")
	}
	if _, err := os.Stat("node_modules/e2b/package.json"); err != nil {
		t.Fatal("the E2B SDKs are not installed: run (cd test/compat && npm ci)")
	}
	c := client.New(url, key)
	ensureBase(t, c)
	ctx := context.Background()
	if list, err := c.List(ctx, "", nil); err == nil {
		for _, s := range list {
			_ = c.Destroy(ctx, s.Name)
		}
	}
	scripts, _ := filepath.Glob(glob)
	if len(scripts) == 0 {
		t.Fatalf("no test scripts %s", glob)
	}
	only := os.Getenv("COMPAT_RUN")
	for _, s := range scripts {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(s), ".test.mjs"), ".mjs")
		if only != "" && !strings.Contains(name, only) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			// --test-force-exit: SDK timers (request timeouts of streams a
			// kill cut) must not keep a finished script alive.
			cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "--test-force-exit", "--test-reporter=spec", s)
			// Only the three variables configure the SDK (and env, the
			// script's expectation).
			cmd.Env = append([]string{
				"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
				"E2B_API_URL=" + url, "E2B_SANDBOX_URL=" + url, "E2B_API_KEY=" + key,
			}, env...)
			out, err := cmd.CombinedOutput()
			t.Logf("%s %v\n%s", s, env, out)
			if err != nil {
				t.Fatalf("%s failed: %v", s, err)
			}
		})
	}
	// Nothing the scripts made may be left running.
	if list, err := c.List(ctx, "", nil); err == nil && len(list) > 0 {
		var names []string
		for _, s := range list {
			names = append(names, s.Name)
			_ = c.Destroy(ctx, s.Name)
		}
		t.Errorf("sandboxes left behind by the scripts: %v", names)
	}
}

//go:build integration

package integration

import (
	"os"
	"os/exec"
	"testing"
)

// TestBrowserConsole runs the headless-chromium console test
// (test/browser, tag browser) against this suite's daemon: it types
// `echo $((6*7))` into a sandbox terminal in the web console, reads 42 off
// the screen, reloads and sees it replayed, and saves screenshots to
// $BERTH_ARTIFACTS (default /tmp/berth-artifacts).
func TestBrowserConsole(t *testing.T) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Skip("needs Debian's chromium (scripts/deps.sh installs it)")
	}
	cmd := exec.Command("go", "test", "-count=1", "-tags", "browser", "-v", "-run", "TestConsoleTerminal", "../browser/")
	cmd.Env = append(os.Environ(), "BERTH_URL=http://"+d.listen, "BERTH_API_KEY="+readKey(t))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("browser test failed: %v", err)
	}
}

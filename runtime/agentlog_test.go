package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRotateAgentLog: at a create, an agent.log over 1 MiB becomes
// agent.log.1 (replacing the previous one), a smaller one is kept (issue
// 12 C: the host-side file stays bounded across runs too).
func TestRotateAgentLog(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, AgentLog)
	os.WriteFile(p, []byte("small"), 0o600)
	rotateAgentLog(p)
	if b, _ := os.ReadFile(p); string(b) != "small" {
		t.Fatalf("a small log was rotated: %q", b)
	}
	big := bytes.Repeat([]byte("x"), agentLogRotateAt+1)
	os.WriteFile(p+".1", []byte("older"), 0o600)
	os.WriteFile(p, big, 0o600)
	rotateAgentLog(p)
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the large log is still there: %v", err)
	}
	if fi, err := os.Stat(p + ".1"); err != nil || fi.Size() != int64(len(big)) {
		t.Fatalf("agent.log.1: %v %v", fi, err)
	}
}

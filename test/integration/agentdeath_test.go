//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestAgentDeathIsNoticed kills a running sandbox's agent (its PID 1) from
// the host, as a crash or a thread bomb would: the daemon notices at once,
// marks the sandbox sleeping with its files kept, and the next request
// starts it again. Before, the sandbox stayed "running" with a dead agent
// and every request failed until a daemon restart.
func TestAgentDeathIsNoticed(t *testing.T) {
	ctx := context.Background()
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-agentdeath"})
	run(t, "it-agentdeath", "echo kept > /home/user/f")
	out, err := exec.Command(filepath.Join(binDir, "runc"), "--root", filepath.Join(itRunDir, "runc"), "state", sb.ID).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", sb.ID, err)
	}
	var st struct{ Pid int }
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runc state: %s %v", out, err)
	}
	if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for {
		cur, err := d.c.Get(ctx, "it-agentdeath")
		if err == nil && cur.State == api.StateSleeping {
			break
		}
		if time.Since(t0) > 15*time.Second {
			t.Fatalf("15 s after its agent was killed the sandbox is %+v (%v), want sleeping", cur, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("agent death noticed after %s", time.Since(t0).Round(time.Millisecond))
	if r := run(t, "it-agentdeath", "cat /home/user/f"); r.Stdout != "kept\n" {
		t.Fatalf("after the agent's death the next request gives %+v", r)
	}
	j, err := d.c.Journal(ctx, "it-agentdeath")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range j {
		found = found || e.Op == "compute-lost"
	}
	if !found {
		t.Fatalf("no compute-lost entry in the journal: %+v", j)
	}
}

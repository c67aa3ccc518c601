package agent_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestIdentityBindOnce: a pool member's agent takes one identity bind,
// and later execs start from its environment; a second bind is refused,
// and an agent not started as a pool member refuses the first (the
// negative control).
func TestIdentityBindOnce(t *testing.T) {
	if !agenttest.Available() {
		t.Skip("needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func(pool bool) *agentclient.Client {
		a := agenttest.StartWith(t, func(cfg *agent.Config) {
			cfg.BaseEnv = []string{"PATH=/usr/bin:/bin", "PLACEHOLDER=1"}
			cfg.AwaitIdentity = pool
		})
		c := agentclient.New(a.Socket)
		t.Cleanup(c.Close)
		if err := c.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	env := func(c *agentclient.Client) string {
		var out bytes.Buffer
		if _, err := c.Exec(ctx, api.ExecRequest{Command: "env"}, &out, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	c := start(true)
	if e := env(c); !strings.Contains(e, "PLACEHOLDER=1") {
		t.Fatalf("before the bind: %s", e)
	}
	if err := c.BindIdentity(ctx, []string{"PATH=/usr/bin:/bin", "BERTH_SANDBOX=box", "TOKEN=t0"}); err != nil {
		t.Fatal(err)
	}
	if e := env(c); strings.Contains(e, "PLACEHOLDER") || !strings.Contains(e, "BERTH_SANDBOX=box\n") || !strings.Contains(e, "TOKEN=t0\n") {
		t.Fatalf("after the bind: %s", e)
	}
	if err := c.BindIdentity(ctx, []string{"PATH=/evil"}); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second bind: want failed precondition, got %v", err)
	}
	if err := c.BindIdentity(ctx, []string{"NOEQUALS"}); err == nil {
		t.Fatal("a malformed entry was accepted")
	}
	if err := start(false).BindIdentity(ctx, []string{"PATH=/evil"}); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("bind on a cold agent: want failed precondition, got %v", err)
	}
}

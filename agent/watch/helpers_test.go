package watch_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
)

// pollDeadline bounds every poll in these tests: generous, so a slow
// machine only makes them slower, never flaky.
const pollDeadline = 20 * time.Second

// newClient starts an in-process agent and returns a ready client to it.
func newClient(t testing.TB) (*agenttest.Agent, *agentclient.Client) {
	t.Helper()
	a := agenttest.Start(t)
	c := agentclient.New(a.Socket)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return a, c
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(pollDeadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

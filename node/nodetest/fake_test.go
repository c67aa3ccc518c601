package nodetest_test

import (
	"testing"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
)

func newAgent(tb testing.TB) string { return agenttest.Start(tb).Socket }

// TestFake holds the fake to the contract it stands in for.
// Without root (agenttest needs it) the fake runs without agents and the
// agent checks skip; the lifecycle and exec checks still run.
func TestFake(t *testing.T) {
	agents, opts := newAgent, []nodetest.Option(nil)
	if !agenttest.Available() {
		agents, opts = nil, []nodetest.Option{nodetest.WithoutAgent()}
	}
	nodetest.Run(t, func(t *testing.T) node.Node { return nodetest.NewFake(t, agents) }, opts...)
}

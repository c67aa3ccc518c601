package agent_test

import (
	"os"
	"testing"

	"github.com/berth-sh/berth/agent"
)

func TestMain(m *testing.M) {
	// As berth-agent's main does: the test binary may have inherited
	// descriptors from whoever started it.
	if err := agent.CloseOnExecInherited(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

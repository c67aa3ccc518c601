package local

import (
	"context"
	"io"
	"sync"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// exec is node.Node's Exec (through compute): it runs a command in the
// sandbox and streams its output. A running exec keeps the sandbox awake.
// The API's exec is the control plane's (control.Plane.Exec), which wakes
// the sandbox and then uses the agent.
func (m *Manager) exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	if err := req.CheckShape(); err != nil {
		return api.ExitStatus{}, err
	}
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return api.ExitStatus{}, err
	}
	defer release()
	return ag.Exec(ctx, req, stdout, stderr)
}

// agent is the sandbox's agent client, waking the sandbox through its
// controller object if it sleeps, with the sandbox held awake until
// release is called (release may be called more than once).
func (m *Manager) agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return ag, func() { once.Do(release) }, nil
}

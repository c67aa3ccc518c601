package local

import (
	"context"
	"fmt"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// A sandbox's start command (api.StartCommand): a background process the
// node starts once the agent is up, after every boot from files. Its
// readiness is the control plane's to wait for (the node's actor lock is
// not held for it).

// startProcessRequest is the agent request that runs s in a sandbox of
// img. An image's own command is its ENTRYPOINT then CMD, run as the
// process itself (exec, as a container's main process is), as the image's
// USER or root, in its WORKDIR or /: what `docker run IMAGE` runs.
func startProcessRequest(s api.StartCommand, img Image) (api.StartProcessRequest, error) {
	req := api.StartProcessRequest{ID: api.StartProcessID, Command: s.Command, Cwd: s.Cwd, Env: s.Env, User: s.User}
	if !s.Image {
		return req, nil
	}
	argv := append(append([]string(nil), img.Entrypoint...), img.Cmd...)
	if len(argv) == 0 {
		return req, errdefs.InvalidArgument("start \"image\": image %s has neither ENTRYPOINT nor CMD; give a command instead", shortDigest(img.Digest))
	}
	req.Command = "exec " + shellJoin(argv)
	if req.User == "" {
		u, _, _ := strings.Cut(img.User, ":")
		if u == "" {
			u = "root"
		}
		req.User = u
	}
	if req.Cwd == "" {
		req.Cwd = img.WorkingDir
		if req.Cwd == "" {
			req.Cwd = "/"
		}
	}
	return req, nil
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// runStartCommand starts the sandbox's start command on its fresh agent.
// A command the agent cannot start (its cwd or user does not exist, say)
// does not fail the boot: the sandbox runs, the journal says why, and the
// readiness wait reports the missing process. Callers hold a.mu.
func (m *Manager) runStartCommand(ctx context.Context, a *actor, req api.StartProcessRequest) {
	if a.agent == nil {
		return
	}
	p, err := a.agent.StartProcess(ctx, req)
	if err != nil {
		m.cfg.Logf("sandbox %s: start command: %v", a.name, err)
		m.journal(ctx, a.name, "start-command-failed", err.Error())
		return
	}
	m.journal(ctx, a.name, "start-command", fmt.Sprintf("pid %d: %s", p.PID, req.Command))
}

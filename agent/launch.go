package agent

import (
	"strings"
	"syscall"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/api"
)

// What the service packages (terminal, interp) get from the server to start
// their programs: resolution as an exec resolves a command, and a start
// through the reaper, which must own every wait status because the agent
// is PID 1.

// prepareCommand resolves req as an exec is resolved.
func (s *Server) prepareCommand(req *api.ExecRequest) (*child.Command, error) {
	plan, err := s.prepareExec(req)
	if err != nil {
		return nil, err
	}
	return &child.Command{
		Argv0: plan.argv0, Argv: plan.argv, Env: plan.env, Dir: plan.dir,
		User: plan.acct.name, UID: plan.acct.uid, GID: plan.acct.gid, Groups: plan.acct.groups,
	}, nil
}

// prepareWithCredential is prepareCommand with the credential to start the
// command with (nil: run as the agent's own user).
func (s *Server) prepareWithCredential(req *api.ExecRequest) (*child.Command, *syscall.Credential, error) {
	plan, err := s.prepareExec(req)
	if err != nil {
		return nil, nil, err
	}
	cred, err := credentialFor(plan.acct)
	if err != nil {
		return nil, nil, err
	}
	return &child.Command{
		Argv0: plan.argv0, Argv: plan.argv, Env: plan.env, Dir: plan.dir,
		User: plan.acct.name, UID: plan.acct.uid, GID: plan.acct.gid, Groups: plan.acct.groups,
	}, cred, nil
}

// startCommand starts a prepared command through the reaper; a failed start
// reads as an exec's does.
func (s *Server) startCommand(c *child.Command, attr *syscall.ProcAttr) (int, <-chan child.Exit, error) {
	pid, exited, err := s.cfg.Reaper.Start(c.Argv0, c.Argv, attr)
	if err != nil {
		return 0, nil, startError(&execPlan{argv0: c.Argv0, acct: account{name: c.User}}, err)
	}
	return pid, exited, nil
}

// userHome resolves a user spec to the user's name and home.
func (s *Server) userHome(spec string) (name, home string, err error) {
	acct, err := s.resolveUser(spec)
	if err != nil {
		return "", "", err
	}
	return acct.name, acct.home, nil
}

// hasProgram reports whether name is on the PATH commands get.
func (s *Server) hasProgram(name string) bool {
	path := defaultPath
	for _, kv := range s.id.baseEnv() {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok && v != "" {
			path = v
		}
	}
	_, err := lookPath(name, path, "/")
	return err == nil
}

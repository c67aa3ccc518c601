package agentclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func sessionPath(id, suffix string) string {
	return "/v1/sessions/" + url.PathEscape(id) + suffix
}

// CreateSession starts a persistent shell session.
func (c *Client) CreateSession(ctx context.Context, req api.CreateSessionRequest) (api.SessionInfo, error) {
	if req.ID != "" {
		if err := checkID("session", req.ID); err != nil {
			return api.SessionInfo{}, err
		}
	}
	if err := checkExec(&api.ExecRequest{Command: "-", Cwd: req.Cwd, Env: req.Env, User: req.User}); err != nil {
		return api.SessionInfo{}, err
	}
	var info api.SessionInfo
	err := c.call(ctx, http.MethodPost, "/v1/sessions", nil, req, &info, maxInfoBody)
	return info, err
}

// GetSession returns one session.
func (c *Client) GetSession(ctx context.Context, id string) (api.SessionInfo, error) {
	if err := checkID("session", id); err != nil {
		return api.SessionInfo{}, err
	}
	var info api.SessionInfo
	err := c.call(ctx, http.MethodGet, sessionPath(id, ""), nil, nil, &info, maxInfoBody)
	return info, err
}

// UpdateSession sets and unsets (api.EnvUnset) variables in a live
// session's shell and changes its default command timeout. It waits for a
// running command of the session, like SessionExec.
func (c *Client) UpdateSession(ctx context.Context, id string, req api.UpdateSessionRequest) (api.SessionInfo, error) {
	if err := checkID("session", id); err != nil {
		return api.SessionInfo{}, err
	}
	if err := checkExec(&api.ExecRequest{Command: "-", Env: req.Env}); err != nil {
		return api.SessionInfo{}, err
	}
	var info api.SessionInfo
	// A running command holds the session: allow as long as a kill.
	err := c.callWithin(ctx, c.callTimeout()+time.Minute, http.MethodPatch, sessionPath(id, ""), nil, req, &info)
	return info, err
}

// ListSessions lists sessions.
func (c *Client) ListSessions(ctx context.Context) ([]api.SessionInfo, error) {
	var res api.SessionList
	if err := c.call(ctx, http.MethodGet, "/v1/sessions", nil, nil, &res, maxJSONBody); err != nil {
		return nil, err
	}
	return res.Sessions, nil
}

// DeleteSession deletes a session: its background processes get SIGTERM,
// then SIGKILL after grace (0: the agent's default of 5 s, negative: none),
// and the shell's whole process tree is killed.
func (c *Client) DeleteSession(ctx context.Context, id string, grace time.Duration) error {
	if err := checkID("session", id); err != nil {
		return err
	}
	q, g := KillOptions{Grace: grace}.query()
	return c.callWithin(ctx, c.callTimeout()+g, http.MethodDelete, sessionPath(id, ""), q, nil, nil)
}

// SessionExec runs a command in a session's shell, streaming its output
// like Exec. Commands of one session run one after another; cd and export
// persist unless req.Cwd or req.Env is set (then the command runs in a
// subshell). Stdin is req.Stdin, or empty. The status says whether the
// command ended the shell, or ran in a new shell because the previous one
// had died.
func (c *Client) SessionExec(ctx context.Context, id string, req api.ExecRequest, stdout, stderr io.Writer) (api.SessionExitStatus, error) {
	if err := checkID("session", id); err != nil {
		return api.SessionExitStatus{}, err
	}
	if err := checkExec(&req); err != nil {
		return api.SessionExitStatus{}, err
	}
	p, err := c.streamFrames(ctx, http.MethodPost, sessionPath(id, "/exec"), nil, req, stdout, stderr)
	if err != nil {
		return api.SessionExitStatus{}, err
	}
	var es api.SessionExitStatus
	if json.Unmarshal(p, &es) != nil {
		return api.SessionExitStatus{}, errdefs.Unavailable("sandbox agent protocol error: malformed exit frame")
	}
	return es, nil
}

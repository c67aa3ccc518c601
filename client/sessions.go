package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// SessionExecResult is the buffered result of a command run in a session:
// an ExecResult plus what happened to the session's shell.
type SessionExecResult struct {
	api.ExecResult
	// ShellExited: the command ended the session's shell (exit, exec);
	// the exit code is the shell's.
	ShellExited bool `json:"shellExited,omitempty"`
	// Restarted: the shell had died before this command and a fresh one
	// ran it; cwd and exported variables were reset. Notice explains.
	Restarted bool   `json:"restarted,omitempty"`
	Notice    string `json:"notice,omitempty"`
}

func sessionPath(sandbox, id string, rest ...string) string {
	return sandboxPath(sandbox, append([]string{"sessions", url.PathEscape(id)}, rest...)...)
}

// CreateSession starts a persistent shell session: cd and export in one
// command persist to the next.
func (c *Client) CreateSession(ctx context.Context, sandbox string, req api.CreateSessionRequest) (api.SessionInfo, error) {
	var info api.SessionInfo
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "sessions"), nil, req, &info)
	return info, err
}

// ListSessions lists a sandbox's sessions.
func (c *Client) ListSessions(ctx context.Context, sandbox string) ([]api.SessionInfo, error) {
	var l api.SessionList
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "sessions"), nil, nil, &l)
	return l.Sessions, err
}

// GetSession returns one session; Cwd is its shell's current directory.
func (c *Client) GetSession(ctx context.Context, sandbox, id string) (api.SessionInfo, error) {
	var info api.SessionInfo
	_, err := c.doJSON(ctx, http.MethodGet, sessionPath(sandbox, id), nil, nil, &info)
	return info, err
}

// UpdateSession sets and unsets variables in a live session's shell (a
// value of api.EnvUnset, null on the wire, unsets) and, when
// req.DefaultTimeoutMs is set, changes the session's default command
// timeout. It waits for a command the session is running.
func (c *Client) UpdateSession(ctx context.Context, sandbox, id string, req api.UpdateSessionRequest) (api.SessionInfo, error) {
	var info api.SessionInfo
	_, err := c.doJSON(ctx, http.MethodPatch, sessionPath(sandbox, id), nil, req, &info)
	return info, err
}

// DeleteSession kills a session's shell and its background processes
// (SIGTERM, then SIGKILL after grace: 0 is the server's default of 5 s,
// negative is none).
func (c *Client) DeleteSession(ctx context.Context, sandbox, id string, grace time.Duration) error {
	_, err := c.doJSON(ctx, http.MethodDelete, sessionPath(sandbox, id), KillOptions{Grace: grace}.query(), nil, nil)
	return err
}

// SessionExec runs a command in a session's shell and returns its buffered
// output (capped like Exec).
func (c *Client) SessionExec(ctx context.Context, sandbox, id string, req api.ExecRequest) (SessionExecResult, error) {
	var res SessionExecResult
	_, err := c.doJSON(ctx, http.MethodPost, sessionPath(sandbox, id, "exec"), nil, req, &res)
	return res, err
}

// SessionExecStream runs a command in a session's shell, copying its
// output to stdout and stderr (nil discards) as it is produced, like
// ExecStream.
func (c *Client) SessionExecStream(ctx context.Context, sandbox, id string, req api.ExecRequest, stdout, stderr io.Writer) (api.SessionExitStatus, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.SessionExitStatus{}, errdefs.InvalidArgument("encoding exec request: %w", err)
	}
	var st api.SessionExitStatus
	err = c.execEvents(ctx, request{
		method: http.MethodPost, path: sessionPath(sandbox, id, "exec"),
		body: bytes.NewReader(body), contentType: "application/json", accept: "text/event-stream",
	}, stdout, stderr, func(exit json.RawMessage) error { return json.Unmarshal(exit, &st) },
		fmt.Sprintf("exec in session %q of %q", id, sandbox))
	return st, err
}

// GitCheckout clones a repository inside the sandbox. Errors keep their
// kinds: a missing repository or branch is errdefs.ErrNotFound, a network
// failure errdefs.ErrUnavailable, a non-empty target
// errdefs.ErrAlreadyExists, an invalid URL errdefs.ErrInvalidArgument.
func (c *Client) GitCheckout(ctx context.Context, sandbox string, req api.GitCheckoutRequest) (api.GitCheckoutResult, error) {
	var res api.GitCheckoutResult
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "git", "checkout"), nil, req, &res)
	return res, err
}

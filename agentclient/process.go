package agentclient

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// validID mirrors the agent's rule for process and session ids; checking
// it here also keeps ids from altering the URL path they are put in.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkID(kind, id string) error {
	if !validID.MatchString(id) {
		return errdefs.InvalidArgument("invalid %s id %q", kind, id)
	}
	return nil
}

func processPath(id string, suffix string) string {
	return "/v1/processes/" + url.PathEscape(id) + suffix
}

// StartProcess starts a background process and returns its handle.
func (c *Client) StartProcess(ctx context.Context, req api.StartProcessRequest) (api.ProcessInfo, error) {
	if req.ID != "" {
		if err := checkID("process", req.ID); err != nil {
			return api.ProcessInfo{}, err
		}
	}
	if req.SessionID != "" {
		if err := checkID("session", req.SessionID); err != nil {
			return api.ProcessInfo{}, err
		}
	}
	if err := checkExec(&api.ExecRequest{Command: req.Command, Cwd: req.Cwd, Env: req.Env, User: req.User}); err != nil {
		return api.ProcessInfo{}, err
	}
	var info api.ProcessInfo
	err := c.call(ctx, http.MethodPost, "/v1/processes", nil, req, &info, maxInfoBody)
	return info, err
}

// ListProcesses lists background processes, of one session when sessionID
// is set.
func (c *Client) ListProcesses(ctx context.Context, sessionID string) ([]api.ProcessInfo, error) {
	var q url.Values
	if sessionID != "" {
		q = url.Values{"sessionId": {sessionID}}
	}
	var res api.ProcessList
	if err := c.call(ctx, http.MethodGet, "/v1/processes", q, nil, &res, maxJSONBody); err != nil {
		return nil, err
	}
	return res.Processes, nil
}

// GetProcess returns one process.
func (c *Client) GetProcess(ctx context.Context, id string) (api.ProcessInfo, error) {
	if err := checkID("process", id); err != nil {
		return api.ProcessInfo{}, err
	}
	var info api.ProcessInfo
	err := c.call(ctx, http.MethodGet, processPath(id, ""), nil, nil, &info, maxInfoBody)
	return info, err
}

// KillOptions tunes a kill.
type KillOptions struct {
	// Signal is sent to the whole process tree: "TERM" (default), "KILL",
	// "INT", "HUP", "QUIT" end it (escalating to SIGKILL after Grace);
	// other signals are only delivered.
	Signal string
	// Grace is the time between the signal and SIGKILL: 0 means the
	// agent's default (5 s), a negative value means none. At most 1 min.
	Grace time.Duration
}

func (o KillOptions) query() (url.Values, time.Duration) {
	q := url.Values{}
	if o.Signal != "" {
		q.Set("signal", o.Signal)
	}
	grace := 5 * time.Second
	if o.Grace < 0 {
		q.Set("graceMs", "0")
		grace = 0
	} else if o.Grace > 0 {
		q.Set("graceMs", strconv.FormatInt(o.Grace.Milliseconds(), 10))
		grace = o.Grace
	}
	return q, grace
}

// KillProcess kills a process tree and returns once it is dead (for a
// terminating signal), with the process's final state.
func (c *Client) KillProcess(ctx context.Context, id string, opts KillOptions) (api.ProcessInfo, error) {
	if err := checkID("process", id); err != nil {
		return api.ProcessInfo{}, err
	}
	q, grace := opts.query()
	var info api.ProcessInfo
	err := c.callWithin(ctx, c.callTimeout()+grace, http.MethodDelete, processPath(id, ""), q, nil, &info)
	return info, err
}

// KillAllProcesses kills every running process and returns how many there
// were.
func (c *Client) KillAllProcesses(ctx context.Context, opts KillOptions) (int, error) {
	q, grace := opts.query()
	q.Del("signal")
	var res api.KillAllResult
	err := c.callWithin(ctx, c.callTimeout()+grace, http.MethodDelete, "/v1/processes", q, nil, &res)
	return res.Killed, err
}

// ProcessLogs returns a process's buffered output.
func (c *Client) ProcessLogs(ctx context.Context, id string) (api.ProcessLogs, error) {
	if err := checkID("process", id); err != nil {
		return api.ProcessLogs{}, err
	}
	var logs api.ProcessLogs
	err := c.call(ctx, http.MethodGet, processPath(id, "/logs"), nil, nil, &logs, 2*64<<20*4/3+maxInfoBody)
	return logs, err
}

// StreamProcessLogs copies a process's output to stdout and stderr (either
// may be nil): first what is buffered, then live output until the process
// ends, and returns its exit status. It never returns a made-up status: a
// stream that ends early or stalls is an Unavailable error, a lost exit
// status an Internal one.
func (c *Client) StreamProcessLogs(ctx context.Context, id string, stdout, stderr io.Writer) (api.ExitStatus, error) {
	if err := checkID("process", id); err != nil {
		return api.ExitStatus{}, err
	}
	p, err := c.streamFrames(ctx, http.MethodGet, processPath(id, "/logs"), url.Values{"follow": {"1"}}, nil, stdout, stderr)
	if err != nil {
		return api.ExitStatus{}, err
	}
	var es api.ExitStatus
	if json.Unmarshal(p, &es) != nil {
		return api.ExitStatus{}, errdefs.Unavailable("sandbox agent protocol error: malformed exit frame")
	}
	return es, nil
}

// WaitForLog waits until a line of the process's stdout or stderr
// (buffered or live) contains req.Pattern, or matches it with Regex. A
// process that ends first fails with FailedPrecondition ("exited with code
// N before it was ready"), a timeout with DeadlineExceeded.
func (c *Client) WaitForLog(ctx context.Context, id string, req api.WaitLogRequest) (api.WaitLogResult, error) {
	if err := checkID("process", id); err != nil {
		return api.WaitLogResult{}, err
	}
	if !utf8.ValidString(req.Pattern) {
		return api.WaitLogResult{}, errdefs.InvalidArgument("pattern is not valid UTF-8")
	}
	res, err := longCall[api.WaitLogResult](ctx, c, processPath(id, "/wait-log"), req)
	if err != nil {
		return api.WaitLogResult{}, err
	}
	return *res, nil
}

// WaitForPort waits until the port is ready, probed from inside the
// sandbox. Errors as for WaitForLog.
func (c *Client) WaitForPort(ctx context.Context, id string, req api.WaitPortRequest) (api.WaitPortResult, error) {
	if err := checkID("process", id); err != nil {
		return api.WaitPortResult{}, err
	}
	res, err := longCall[api.WaitPortResult](ctx, c, processPath(id, "/wait-port"), req)
	if err != nil {
		return api.WaitPortResult{}, err
	}
	return *res, nil
}

// WaitForExit waits for the process to end (timeout 0: no timeout) and
// returns its final state.
func (c *Client) WaitForExit(ctx context.Context, id string, timeout time.Duration) (api.ProcessInfo, error) {
	if err := checkID("process", id); err != nil {
		return api.ProcessInfo{}, err
	}
	res, err := longCall[api.ProcessInfo](ctx, c, processPath(id, "/wait-exit"), api.WaitExitRequest{TimeoutMs: timeout.Milliseconds()})
	if err != nil {
		return api.ProcessInfo{}, err
	}
	return *res, nil
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func processPath(sandbox, id string, rest ...string) string {
	return sandboxPath(sandbox, append([]string{"processes", url.PathEscape(id)}, rest...)...)
}

// StartProcess starts a background process (req.Command runs with
// /bin/sh -c) and returns at once with its id.
func (c *Client) StartProcess(ctx context.Context, sandbox string, req api.StartProcessRequest) (api.ProcessInfo, error) {
	var info api.ProcessInfo
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "processes"), nil, req, &info)
	return info, err
}

// ListProcesses lists a sandbox's background processes, of one session
// when sessionID is set.
func (c *Client) ListProcesses(ctx context.Context, sandbox, sessionID string) ([]api.ProcessInfo, error) {
	var q url.Values
	if sessionID != "" {
		q = url.Values{"sessionId": {sessionID}}
	}
	var l api.ProcessList
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "processes"), q, nil, &l)
	return l.Processes, err
}

// GetProcess returns one process.
func (c *Client) GetProcess(ctx context.Context, sandbox, id string) (api.ProcessInfo, error) {
	var info api.ProcessInfo
	_, err := c.doJSON(ctx, http.MethodGet, processPath(sandbox, id), nil, nil, &info)
	return info, err
}

// KillOptions tunes a kill.
type KillOptions struct {
	// Signal: "TERM" (default), "KILL", "INT", "HUP" or "QUIT" end the
	// process tree, escalating to SIGKILL after Grace; other signals are
	// only delivered.
	Signal string
	// Grace between the signal and SIGKILL: 0 is the server's default
	// (5 s), negative is none. At most a minute.
	Grace time.Duration
}

func (o KillOptions) query() url.Values {
	q := url.Values{}
	if o.Signal != "" {
		q.Set("signal", o.Signal)
	}
	switch {
	case o.Grace < 0:
		q.Set("graceMs", "0")
	case o.Grace > 0:
		q.Set("graceMs", strconv.FormatInt(max(o.Grace.Milliseconds(), 1), 10))
	}
	return q
}

// KillProcess signals a process's whole tree and, for a terminating
// signal, returns once it is dead, with its final state.
func (c *Client) KillProcess(ctx context.Context, sandbox, id string, opts KillOptions) (api.ProcessInfo, error) {
	var info api.ProcessInfo
	_, err := c.doJSON(ctx, http.MethodDelete, processPath(sandbox, id), opts.query(), nil, &info)
	return info, err
}

// KillAllProcesses kills every running process of the sandbox and returns
// how many there were. opts.Signal is ignored (always TERM, then KILL).
func (c *Client) KillAllProcesses(ctx context.Context, sandbox string, opts KillOptions) (int, error) {
	q := opts.query()
	q.Del("signal")
	var res api.KillAllResult
	_, err := c.doJSON(ctx, http.MethodDelete, sandboxPath(sandbox, "processes"), q, nil, &res)
	return res.Killed, err
}

// ProcessLogs returns a process's buffered output (the last 1 MiB per
// stream by default; Dropped* count what fell out).
func (c *Client) ProcessLogs(ctx context.Context, sandbox, id string) (api.ProcessLogs, error) {
	var logs api.ProcessLogs
	_, err := c.doJSON(ctx, http.MethodGet, processPath(sandbox, id, "logs"), nil, nil, &logs)
	return logs, err
}

// StreamProcessLogs copies a process's output to stdout and stderr (nil
// discards): what is buffered, then live output until the process ends. It
// returns the process's exit status. As with ExecStream, a stream that
// breaks before the exit status arrives is errdefs.ErrUnavailable, and a
// status the sandbox lost is an error, never a made-up code.
func (c *Client) StreamProcessLogs(ctx context.Context, sandbox, id string, stdout, stderr io.Writer) (api.ExitStatus, error) {
	var st api.ExitStatus
	err := c.execEvents(ctx, request{method: http.MethodGet, path: processPath(sandbox, id, "logs"), accept: "text/event-stream"},
		stdout, stderr, func(exit json.RawMessage) error { return json.Unmarshal(exit, &st) },
		fmt.Sprintf("logs of process %q in %q", id, sandbox))
	return st, err
}

// WaitForLog waits until a line of the process's output contains
// req.Pattern (or matches it, with Regex). A process that exits first is
// errdefs.ErrFailedPrecondition; a timeout errdefs.ErrDeadlineExceeded.
func (c *Client) WaitForLog(ctx context.Context, sandbox, id string, req api.WaitLogRequest) (api.WaitLogResult, error) {
	var res api.WaitLogResult
	_, err := c.doJSON(ctx, http.MethodPost, processPath(sandbox, id, "wait-log"), nil, req, &res)
	return res, err
}

// WaitForPort waits until the port answers (probed inside the sandbox).
// Errors as for WaitForLog.
func (c *Client) WaitForPort(ctx context.Context, sandbox, id string, req api.WaitPortRequest) (api.WaitPortResult, error) {
	var res api.WaitPortResult
	_, err := c.doJSON(ctx, http.MethodPost, processPath(sandbox, id, "wait-port"), nil, req, &res)
	return res, err
}

// WaitForExit waits for the process to end (timeout 0: no timeout) and
// returns its final state.
func (c *Client) WaitForExit(ctx context.Context, sandbox, id string, timeout time.Duration) (api.ProcessInfo, error) {
	var info api.ProcessInfo
	_, err := c.doJSON(ctx, http.MethodPost, processPath(sandbox, id, "wait-exit"), nil, api.WaitExitRequest{TimeoutMs: timeout.Milliseconds()}, &info)
	return info, err
}

// execEvent is an ExecEvent whose exit is kept raw, so that session execs
// can decode their richer exit status from it.
type execEvent struct {
	Type  string          `json:"type"`
	Data  []byte          `json:"data,omitempty"`
	Exit  json.RawMessage `json:"exit,omitempty"`
	Error *api.Error      `json:"error,omitempty"`
}

// execEvents runs an exec-style event stream (stdout and stderr events,
// then one exit or error event) and hands the exit event's payload to
// onExit. what names the stream in errors.
func (c *Client) execEvents(ctx context.Context, r request, stdout, stderr io.Writer, onExit func(json.RawMessage) error, what string) error {
	// Cancel on return so that a local failure also ends the stream on
	// the server, by closing the connection.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if finished {
			closeBody(res.Body)
		} else {
			cancel()
			res.Body.Close()
		}
	}()
	if err := expectEventStream(res); err != nil {
		return err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	err = readEvents(res.Body, func(ev string, data []byte) (bool, error) {
		switch ev {
		case "stdout", "stderr", "exit", "error":
		default:
			return false, nil // unknown events are for newer clients
		}
		var e execEvent
		if err := json.Unmarshal(data, &e); err != nil {
			return false, errdefs.Internal("malformed %s event from server: %w", ev, err)
		}
		switch ev {
		case "stdout":
			return false, writeAll(stdout, e.Data, "stdout")
		case "stderr":
			return false, writeAll(stderr, e.Data, "stderr")
		case "exit":
			if len(e.Exit) == 0 || string(e.Exit) == "null" {
				return false, errdefs.Internal("exit event without an exit status")
			}
			if err := onExit(e.Exit); err != nil {
				return false, errdefs.Internal("malformed exit status from server: %w", err)
			}
			finished = true
			return true, nil
		default:
			if e.Error == nil {
				return false, errdefs.Internal("error event without an error")
			}
			finished = true
			return false, e.Error.Err()
		}
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStreamEnded):
		return errdefs.Unavailable("%s: the stream ended before the exit status arrived; the outcome is unknown", what)
	case errors.As(err, new(*localWriteError)), isErrdefs(err):
		return err
	}
	return c.readError(ctx, what+": reading the stream", err)
}

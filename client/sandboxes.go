package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Create creates a sandbox. An existing sandbox of that name is an
// errdefs.ErrAlreadyExists error.
func (c *Client) Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	_, err := c.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &sb)
	return sb, err
}

// GetOrCreate returns the named sandbox, creating it (or waking it) as
// needed, and reports whether it was created.
func (c *Client) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, bool, error) {
	var sb api.Sandbox
	status, err := c.doJSON(ctx, http.MethodPut, sandboxPath(req.Name), nil, req, &sb)
	return sb, status == http.StatusCreated, err
}

// Get returns one sandbox.
func (c *Client) Get(ctx context.Context, name string) (api.Sandbox, error) {
	var sb api.Sandbox
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name), nil, nil, &sb)
	return sb, err
}

// List returns the sandboxes in state (all if empty) carrying every label
// in labels.
func (c *Client) List(ctx context.Context, state string, labels map[string]string) ([]api.Sandbox, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+"="+labels[k])
	}
	var list api.SandboxList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &list)
	return list.Sandboxes, err
}

// Destroy deletes a sandbox and its files.
func (c *Client) Destroy(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, sandboxPath(name), nil, nil, nil)
	return err
}

// Sleep stops a sandbox's compute now, keeping its files.
func (c *Client) Sleep(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(name, "sleep"), nil, nil, nil)
	return err
}

// Exec runs a command and returns its buffered output. Output beyond the
// server's cap (16 MiB per stream by default) is dropped and Truncated set;
// use ExecStream for unbounded output.
func (c *Client) Exec(ctx context.Context, name string, req api.ExecRequest) (api.ExecResult, error) {
	var res api.ExecResult
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(name, "exec"), nil, req, &res)
	return res, err
}

// ExecStream runs a command and copies its output to stdout and stderr (nil
// discards) as it is produced. It returns the command's exit status. If the
// stream breaks before the server reports how the command ended, the error
// is errdefs.ErrUnavailable: the outcome is unknown, and no exit code is
// made up for it.
func (c *Client) ExecStream(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.ExitStatus{}, errdefs.InvalidArgument("encoding exec request: %w", err)
	}
	// Cancel on return so that a local failure (stdout closed) also ends
	// the command on the server, by closing the connection.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := c.do(ctx, request{
		method: http.MethodPost, path: sandboxPath(name, "exec"),
		body: bytesReader(body), contentType: "application/json", accept: "text/event-stream",
	})
	if err != nil {
		return api.ExitStatus{}, err
	}
	// After a terminal event, read the stream's end so that the
	// connection goes back to the pool; otherwise drop it.
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
		return api.ExitStatus{}, err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var status api.ExitStatus
	err = readEvents(res.Body, func(ev string, data []byte) (bool, error) {
		var e api.ExecEvent
		switch ev {
		case "stdout", "stderr", "exit", "error":
			if err := json.Unmarshal(data, &e); err != nil {
				return false, errdefs.Internal("malformed %s event from server: %w", ev, err)
			}
		default:
			return false, nil // unknown events are for newer clients
		}
		switch ev {
		case "stdout":
			return false, writeAll(stdout, e.Data, "stdout")
		case "stderr":
			return false, writeAll(stderr, e.Data, "stderr")
		case "exit":
			if e.Exit == nil {
				return false, errdefs.Internal("exit event without an exit status")
			}
			status = *e.Exit
			finished = true
			return true, nil
		default: // error
			if e.Error == nil {
				return false, errdefs.Internal("error event without an error")
			}
			finished = true
			return false, e.Error.Err()
		}
	})
	switch {
	case err == nil:
		return status, nil
	case errors.Is(err, errStreamEnded):
		return api.ExitStatus{}, errdefs.Unavailable("exec in %q: the stream ended before the command's exit status arrived; its outcome is unknown", name)
	case errors.As(err, new(*localWriteError)), isErrdefs(err):
		return api.ExitStatus{}, err
	}
	return api.ExitStatus{}, c.readError(ctx, fmt.Sprintf("exec in %q: reading the output stream", name), err)
}

// localWriteError is a failure to write output on our side (a closed pipe),
// kept distinct from server failures.
type localWriteError struct {
	stream string
	err    error
}

func (e *localWriteError) Error() string { return "writing " + e.stream + ": " + e.err.Error() }
func (e *localWriteError) Unwrap() error { return e.err }

func writeAll(w io.Writer, p []byte, stream string) error {
	if _, err := w.Write(p); err != nil {
		return &localWriteError{stream, err}
	}
	return nil
}

func isErrdefs(err error) bool {
	var e *errdefs.Error
	return errors.As(err, &e)
}

func expectEventStream(res *http.Response) error {
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		closeBody(res.Body)
		return errdefs.Internal("server answered a stream request with %q, not text/event-stream", ct)
	}
	return nil
}

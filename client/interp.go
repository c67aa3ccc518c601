package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxCodeEventLine bounds one line of a code run stream: a result event
// carries whole images (base64), so the limit is far above maxEventLine.
const maxCodeEventLine = 64 << 20

func codeContextPath(sandbox, id string, rest ...string) string {
	return sandboxPath(sandbox, append([]string{"code", "contexts", url.PathEscape(id)}, rest...)...)
}

// CreateCodeContext starts a code context: a long-lived python, javascript
// or typescript interpreter in the sandbox whose state persists across runs.
func (c *Client) CreateCodeContext(ctx context.Context, sandbox string, req api.CreateCodeContextRequest) (api.CodeContext, error) {
	var info api.CodeContext
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "code", "contexts"), nil, req, &info)
	return info, err
}

// ListCodeContexts lists a sandbox's code contexts.
func (c *Client) ListCodeContexts(ctx context.Context, sandbox string) ([]api.CodeContext, error) {
	var l api.CodeContextList
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "code", "contexts"), nil, nil, &l)
	return l.Contexts, err
}

// DeleteCodeContext kills a context's interpreter.
func (c *Client) DeleteCodeContext(ctx context.Context, sandbox, id string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, codeContextPath(sandbox, id), nil, nil, nil)
	return err
}

// RestartCodeContext replaces a context's interpreter, clearing its state.
func (c *Client) RestartCodeContext(ctx context.Context, sandbox, id string) (api.CodeContext, error) {
	var info api.CodeContext
	_, err := c.doJSON(ctx, http.MethodPost, codeContextPath(sandbox, id, "restart"), nil, nil, &info)
	return info, err
}

// RunCode runs code and streams its events to onEvent (nil: buffered
// only) as they happen. The returned result folds every event, E2B style
// (results, logs, error, executionCount). An exception in the code is
// res.Error, not err; err is for runs that could not complete. Cancelling
// ctx interrupts the code in the sandbox.
func (c *Client) RunCode(ctx context.Context, sandbox string, req api.RunCodeRequest, onEvent func(api.CodeEvent)) (api.CodeRunResult, error) {
	res := api.CodeRunResult{Results: []api.CodeResult{}, Logs: api.CodeLogs{Stdout: []string{}, Stderr: []string{}}, Events: []api.CodeEvent{}}
	body, err := json.Marshal(req)
	if err != nil {
		return res, errdefs.InvalidArgument("encoding run request: %w", err)
	}
	resp, err := c.do(ctx, request{
		method: http.MethodPost, path: sandboxPath(sandbox, "code", "run"),
		body: bytes.NewReader(body), contentType: "application/json", accept: "text/event-stream",
	})
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	err = readEventsMax(resp.Body, maxCodeEventLine, func(name string, data []byte) (bool, error) {
		var ev struct {
			api.CodeEvent
			Failure *api.Error `json:"failure"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, errdefs.Unavailable("malformed %s event from the server: %w", name, err)
		}
		if name == "failure" {
			if ev.Failure == nil {
				return false, errdefs.Unavailable("the code run failed")
			}
			return false, ev.Failure.Err()
		}
		ev.Type = name
		res.Add(ev.CodeEvent)
		if onEvent != nil {
			onEvent(ev.CodeEvent)
		}
		return name == api.CodeEventComplete, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return res, c.readError(ctx, "code run in "+sandbox, ctx.Err())
		}
		if errors.Is(err, errStreamEnded) {
			return res, errdefs.Unavailable("code run in %q: the stream ended without a complete event", sandbox)
		}
		return res, err
	}
	return res, nil
}

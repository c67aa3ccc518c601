package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	// kernelCallTimeout covers starting an interpreter.
	kernelCallTimeout = 90 * time.Second
	// maxCodeEvent bounds one event line from the agent (a large PNG).
	maxCodeEvent = 64 << 20
)

func codeContextPath(id, suffix string) string {
	return "/v1/code/contexts/" + url.PathEscape(id) + suffix
}

// CreateCodeContext starts a new interpreter in the sandbox.
func (c *Client) CreateCodeContext(ctx context.Context, req api.CreateCodeContextRequest) (api.CodeContext, error) {
	var info api.CodeContext
	err := c.callWithin(ctx, kernelCallTimeout, http.MethodPost, "/v1/code/contexts", nil, req, &info)
	return info, err
}

// ListCodeContexts lists the sandbox's code contexts.
func (c *Client) ListCodeContexts(ctx context.Context) ([]api.CodeContext, error) {
	var res api.CodeContextList
	if err := c.call(ctx, http.MethodGet, "/v1/code/contexts", nil, nil, &res, maxJSONBody); err != nil {
		return nil, err
	}
	return res.Contexts, nil
}

// DeleteCodeContext kills a context's interpreter and forgets it.
func (c *Client) DeleteCodeContext(ctx context.Context, id string) error {
	if err := checkID("code context", id); err != nil {
		return err
	}
	return c.call(ctx, http.MethodDelete, codeContextPath(id, ""), nil, nil, nil, 0)
}

// RestartCodeContext replaces a context's interpreter, clearing its state.
func (c *Client) RestartCodeContext(ctx context.Context, id string) (api.CodeContext, error) {
	var info api.CodeContext
	if err := checkID("code context", id); err != nil {
		return info, err
	}
	err := c.callWithin(ctx, kernelCallTimeout, http.MethodPost, codeContextPath(id, "/restart"), nil, nil, &info)
	return info, err
}

// RunCode runs code and calls onEvent (when non-nil) for each event as it
// arrives. It returns the folded result once the complete event arrived; a
// stream that ends without one, or is silent for StallTimeout, is an
// Unavailable error. Cancelling ctx interrupts the code.
func (c *Client) RunCode(ctx context.Context, req api.RunCodeRequest, onEvent func(api.CodeEvent)) (api.CodeRunResult, error) {
	return c.RunCodeStarted(ctx, req, nil, onEvent)
}

// RunCodeStarted is RunCode that also calls onStart (when non-nil) once
// the agent accepted the run, before any event: a relay answers its own
// caller at that point, so a cell that prints nothing still has a started
// stream.
func (c *Client) RunCodeStarted(ctx context.Context, req api.RunCodeRequest, onStart func(), onEvent func(api.CodeEvent)) (api.CodeRunResult, error) {
	res := api.CodeRunResult{Results: []api.CodeResult{}, Logs: api.CodeLogs{Stdout: []string{}, Stderr: []string{}}, Events: []api.CodeEvent{}}
	if req.Context != "" {
		if err := checkID("code context", req.Context); err != nil {
			return res, err
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return res, errdefs.InvalidArgument("encode request: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := c.stallTimeout()
	if stall < kernelCallTimeout {
		// The first run of a default context starts its interpreter
		// before the first byte.
		stall = kernelCallTimeout
	}
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer wd.Stop()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint("/v1/code/run", nil), bytes.NewReader(body))
	if err != nil {
		return res, errdefs.InvalidArgument("build request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return res, c.streamError(ctx, stall, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, errorFromResponse(resp)
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.CodeContentType {
		return res, errdefs.Unavailable("sandbox agent protocol error: code run answered with content type %q", ct)
	}
	if onStart != nil {
		onStart()
	}
	// From here the agent sends a heartbeat at least every few seconds.
	stall = c.stallTimeout()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxCodeEvent)
	for {
		wd.Reset(stall)
		if !sc.Scan() {
			err := sc.Err()
			if err == nil {
				err = errdefs.Unavailable("sandbox agent ended the code run without a complete event")
			}
			return res, c.streamError(ctx, stall, err)
		}
		var ev api.CodeEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return res, errdefs.Unavailable("sandbox agent protocol error: malformed code event: %w", err)
		}
		switch ev.Type {
		case api.CodeEventStdout, api.CodeEventStderr, api.CodeEventResult, api.CodeEventError, api.CodeEventComplete:
		default:
			continue // heartbeat
		}
		res.Add(ev)
		if onEvent != nil {
			onEvent(ev)
		}
		if ev.Type == api.CodeEventComplete {
			return res, nil
		}
	}
}

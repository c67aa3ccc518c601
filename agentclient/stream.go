package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxResultBody bounds a long call's answer (leading heartbeat newlines
// included, which reset the stall watchdog but still count).
const maxResultBody = 1 << 20

// streamFrames sends a request whose answer is a frame stream (the exec
// wire format), copies stdout and stderr frames to the writers, and returns
// the payload of the final exit frame. As with Exec, a stream that ends
// without an exit or error frame, or that is silent for StallTimeout, is an
// Unavailable error, never an invented status.
func (c *Client) streamFrames(ctx context.Context, method, path string, q url.Values, in any, stdout, stderr io.Writer) ([]byte, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, errdefs.InvalidArgument("encode request: %w", err)
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := c.stallTimeout()
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer wd.Stop()
	kick := func() { wd.Reset(stall) }

	hreq, err := http.NewRequestWithContext(ctx, method, endpoint(path, q), nil)
	if err != nil {
		return nil, errdefs.InvalidArgument("build request: %w", err)
	}
	if in != nil {
		hreq.GetBody = func() (io.ReadCloser, error) {
			return io.NopCloser(&kickReader{r: bytes.NewReader(body), kick: kick}), nil
		}
		hreq.Body, _ = hreq.GetBody()
		hreq.ContentLength = int64(len(body))
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, c.streamError(ctx, stall, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if err := errorFromResponse(resp); context.Cause(ctx) != errStalled {
			return nil, err
		}
		return nil, c.streamError(ctx, stall, nil)
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.ExecContentType {
		return nil, errdefs.Unavailable("sandbox agent protocol error: %s answered with content type %q", path, ct)
	}
	fr := wire.NewFrameReader(resp.Body, wire.MaxRead)
	for {
		kick()
		t, p, err := fr.Next()
		if err != nil {
			return nil, c.streamError(ctx, stall, err)
		}
		switch t {
		case wire.Stdout, wire.Stderr:
			w := stdout
			if t == wire.Stderr {
				w = stderr
			}
			if w == nil {
				continue
			}
			wd.Stop() // a slow consumer is not a stalled agent
			if _, err := w.Write(p); err != nil {
				return nil, fmt.Errorf("writing %s: %w", t, err)
			}
		case wire.Heartbeat:
		case wire.Exit:
			if len(p) > maxErrorBody {
				return nil, errdefs.Unavailable("sandbox agent protocol error: oversized exit frame")
			}
			out := append([]byte(nil), p...)
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			return out, nil
		case wire.Error:
			var e api.Error
			if len(p) > maxErrorBody || json.Unmarshal(p, &e) != nil || e.Code == "" {
				return nil, errdefs.Unavailable("sandbox agent protocol error: malformed error frame")
			}
			return nil, e.Err()
		default:
			return nil, errdefs.Unavailable("sandbox agent protocol error: unknown frame %s", t)
		}
	}
}

// watchdogReader re-arms a stall watchdog on every read that returns data.
type watchdogReader struct {
	r    io.Reader
	kick func()
}

func (w *watchdogReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.kick()
	}
	return n, err
}

// longCall posts in to a long-running endpoint (the agent answers 200 at
// once, sends a newline every heartbeat and then an api.WaitEnvelope) and
// returns the envelope's result. Silence for StallTimeout means the agent
// is gone.
func longCall[T any](ctx context.Context, c *Client, path string, in any) (*T, error) {
	data, err := json.Marshal(in)
	if err != nil {
		return nil, errdefs.InvalidArgument("encode request: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := c.stallTimeout()
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer wd.Stop()
	kick := func() { wd.Reset(stall) }
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint(path, nil), bytes.NewReader(data))
	if err != nil {
		return nil, errdefs.InvalidArgument("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(ctx, req)
	if err != nil {
		if context.Cause(ctx) == errStalled {
			return nil, c.streamError(ctx, stall, err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(&watchdogReader{r: resp.Body, kick: kick}, maxResultBody+1))
	if err != nil {
		return nil, c.streamError(ctx, stall, err)
	}
	if len(body) > maxResultBody {
		return nil, errdefs.Unavailable("sandbox agent response to %s exceeds %d bytes", path, maxResultBody)
	}
	var env api.WaitEnvelope[T]
	if err := json.Unmarshal(body, &env); err != nil {
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, c.streamError(ctx, stall, io.ErrUnexpectedEOF)
		}
		return nil, errdefs.Unavailable("sandbox agent sent invalid JSON for %s: %w", path, err)
	}
	switch {
	case env.Error != nil && env.Error.Code != "":
		return nil, env.Error.Err()
	case env.Result != nil:
		return env.Result, nil
	}
	return nil, errdefs.Unavailable("sandbox agent protocol error: %s answered with neither a result nor an error", path)
}

// callWithin is call with its own timeout instead of CallTimeout, for calls
// whose answer may legitimately take longer (a kill with a grace period).
func (c *Client) callWithin(ctx context.Context, timeout time.Duration, method, path string, q url.Values, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return errdefs.InvalidArgument("encode request: %w", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint(path, q), body)
	if err != nil {
		return errdefs.InvalidArgument("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := decodeBody(resp.Body, maxJSONBody, out); err != nil {
		if ctx.Err() != nil {
			return c.transportError(ctx, ctx.Err())
		}
		return err
	}
	return nil
}

package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

var errStalled = errors.New("sandbox agent stalled")

// kickReader re-arms the stall watchdog while a large request (stdin) is
// being sent, so a slow upload is not taken for a dead agent.
type kickReader struct {
	r    io.Reader
	kick func()
}

func (k *kickReader) Read(p []byte) (int, error) {
	k.kick()
	return k.r.Read(p)
}

// Exec runs a command in the sandbox, copying its output to stdout and
// stderr (either may be nil to discard) as it arrives, and returns how it
// exited.
//
// The exit status comes only from the agent's exit frame. If the stream ends
// without one, or no frame (not even a heartbeat) arrives for StallTimeout,
// Exec returns an Unavailable error and never an invented exit code: a
// caller must not mistake a killed agent for a command that failed.
func (c *Client) Exec(ctx context.Context, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	if err := checkExec(&req); err != nil {
		return api.ExitStatus{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return api.ExitStatus{}, errdefs.InvalidArgument("encode exec request: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := c.stallTimeout()
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer wd.Stop()
	kick := func() { wd.Reset(stall) }

	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint("/v1/exec", nil), nil)
	if err != nil {
		return api.ExitStatus{}, errdefs.InvalidArgument("build exec request: %w", err)
	}
	hreq.GetBody = func() (io.ReadCloser, error) {
		return io.NopCloser(&kickReader{r: bytes.NewReader(body), kick: kick}), nil
	}
	hreq.Body, _ = hreq.GetBody()
	hreq.ContentLength = int64(len(body))
	hreq.Header.Set("Content-Type", "application/json")

	resp, err := c.hc.Do(hreq)
	if err != nil {
		return api.ExitStatus{}, c.streamError(ctx, stall, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if err := errorFromResponse(resp); context.Cause(ctx) != errStalled {
			return api.ExitStatus{}, err
		}
		return api.ExitStatus{}, c.streamError(ctx, stall, nil)
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.ExecContentType {
		return api.ExitStatus{}, errdefs.Unavailable("sandbox agent protocol error: exec answered with content type %q", ct)
	}

	fr := wire.NewFrameReader(resp.Body, wire.MaxRead)
	for {
		kick()
		t, p, err := fr.Next()
		if err != nil {
			return api.ExitStatus{}, c.streamError(ctx, stall, err)
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
			// A slow consumer is not a stalled agent.
			wd.Stop()
			if _, err := w.Write(p); err != nil {
				return api.ExitStatus{}, fmt.Errorf("exec: writing %s: %w", t, err)
			}
		case wire.Heartbeat:
		case wire.Exit:
			var es api.ExitStatus
			if len(p) > maxErrorBody || json.Unmarshal(p, &es) != nil {
				return api.ExitStatus{}, errdefs.Unavailable("sandbox agent protocol error: malformed exit frame")
			}
			// Let the connection go back to the pool.
			io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			return es, nil
		case wire.Error:
			var e api.Error
			if len(p) > maxErrorBody || json.Unmarshal(p, &e) != nil || e.Code == "" {
				return api.ExitStatus{}, errdefs.Unavailable("sandbox agent protocol error: malformed error frame")
			}
			return api.ExitStatus{}, e.Err()
		default:
			return api.ExitStatus{}, errdefs.Unavailable("sandbox agent protocol error: unknown frame %s", t)
		}
	}
}

// streamError explains why an exec ended without an exit frame.
func (c *Client) streamError(ctx context.Context, stall time.Duration, err error) error {
	if context.Cause(ctx) == errStalled {
		return errdefs.Unavailable("sandbox agent stopped responding: nothing received for %s", stall)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("exec: %w", ctx.Err())
	}
	if errors.Is(err, wire.ErrFrameTooLarge) {
		return errdefs.Unavailable("sandbox agent protocol error: %w", err)
	}
	var kind *errdefs.Error
	if errors.As(err, &kind) { // from dialPinned
		return kind
	}
	return errdefs.Unavailable("sandbox agent stopped responding: the exec stream ended without an exit status (%w)", err)
}

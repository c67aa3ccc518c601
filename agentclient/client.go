package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Bounds on what an (untrusted) agent can make the host read.
const (
	maxJSONBody   = 64 << 20 // file listings
	maxErrorBody  = 64 << 10
	maxHeaderSize = 64 << 10

	// DefaultStallTimeout is how long an exec may go without any frame
	// (the agent sends a heartbeat every 2 s when idle).
	DefaultStallTimeout = 10 * time.Second
	// DefaultCallTimeout bounds each non-streaming call.
	DefaultCallTimeout = 30 * time.Second
	// responseHeaderTimeout bounds the wait for response headers of any
	// call, including an upload's fsync and rename.
	responseHeaderTimeout = 2 * time.Minute
)

// Client talks to one sandbox's agent. It is safe for concurrent use.
type Client struct {
	// StallTimeout is how long Exec waits for the next frame before it
	// declares the agent dead. Set before first use; 0 means the default.
	StallTimeout time.Duration
	// CallTimeout bounds non-streaming calls. Set before first use; 0
	// means the default.
	CallTimeout time.Duration

	socket string
	tr     *http.Transport
	hc     *http.Client
}

// New returns a client for the agent socket at socketPath. It does not dial.
func New(socketPath string) *Client {
	return newClient(socketPath, dialPinned)
}

// NewDialer returns a client whose connections come from dial: a remote
// node's tunnel to the agent (package node/remote). The peer is still the
// untrusted agent, so every bound of this package applies. name labels
// errors.
func NewDialer(name string, dial func(ctx context.Context) (net.Conn, error)) *Client {
	return newClient(name, func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) })
}

func newClient(socketPath string, dial func(context.Context, string) (net.Conn, error)) *Client {
	c := &Client{socket: socketPath}
	c.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, socketPath)
		},
		// Keep connections pooled: an exec round trip must not pay for a
		// new connection.
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxHeaderSize,
		ResponseHeaderTimeout:  responseHeaderTimeout,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
	}
	c.hc = &http.Client{
		Transport: c.tr,
		// Never follow a redirect an agent sends.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// Close drops pooled connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Dial opens one raw connection to the agent with the client's own dialer
// (for a socket, the pinned dial that refuses a planted symlink). A remote
// node splices it to the control plane's tunnel (package node/remote); the
// caller closes it.
func (c *Client) Dial(ctx context.Context) (net.Conn, error) {
	conn, err := c.tr.DialContext(ctx, "unix", "agent")
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	return conn, nil
}

func (c *Client) stallTimeout() time.Duration {
	if c.StallTimeout > 0 {
		return c.StallTimeout
	}
	return DefaultStallTimeout
}

func (c *Client) callTimeout() time.Duration {
	if c.CallTimeout > 0 {
		return c.CallTimeout
	}
	return DefaultCallTimeout
}

func endpoint(path string, q url.Values) string {
	u := "http://agent" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// do sends a request and turns transport failures and non-2xx answers into
// errdefs errors. On success the caller owns resp.Body.
func (c *Client) do(ctx context.Context, req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, errorFromResponse(resp)
	}
	return resp, nil
}

// transportError explains a failed round trip.
func (c *Client) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errdefs.Unavailable("sandbox agent did not answer in time: %w", ctx.Err())
		}
		return fmt.Errorf("sandbox agent call: %w", ctx.Err())
	}
	var kind *errdefs.Error
	if errors.As(err, &kind) { // from dialPinned
		return kind
	}
	return errdefs.Unavailable("sandbox agent unreachable at %s: %w", c.socket, err)
}

// errorFromResponse decodes a bounded api.Error body back into its kind.
func errorFromResponse(resp *http.Response) error {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody+1))
	if err != nil {
		return errdefs.Unavailable("sandbox agent returned HTTP %d and the body could not be read: %w", resp.StatusCode, err)
	}
	if len(data) > maxErrorBody {
		return errdefs.Unavailable("sandbox agent returned HTTP %d with an error body over %d bytes", resp.StatusCode, maxErrorBody)
	}
	var e api.Error
	if json.Unmarshal(data, &e) != nil || e.Code == "" {
		return errdefs.Unavailable("sandbox agent returned HTTP %d without a valid error body", resp.StatusCode)
	}
	return e.Err()
}

// decodeBody reads at most limit bytes of JSON into v.
func decodeBody(body io.Reader, limit int64, v any) error {
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return errdefs.Unavailable("reading sandbox agent response: %w", err)
	}
	if int64(len(data)) > limit {
		return errdefs.Unavailable("sandbox agent response exceeds %d bytes", limit)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.Unavailable("sandbox agent sent invalid JSON: %w", err)
	}
	return nil
}

// call is a bounded, non-streaming request: in is sent as JSON when non-nil,
// the answer is decoded into out when non-nil.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any, limit int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout())
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
	if err := decodeBody(resp.Body, limit, out); err != nil {
		if ctx.Err() != nil {
			return c.transportError(ctx, ctx.Err())
		}
		return err
	}
	return nil
}

// Health returns the agent's health. An agent that speaks another protocol
// version is refused: talking to it could misparse its answers.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	if err := c.call(ctx, http.MethodGet, "/v1/health", nil, nil, &h, maxErrorBody); err != nil {
		return api.Health{}, err
	}
	if h.Protocol != wire.ProtocolVersion {
		return h, errdefs.FailedPrecondition("agent protocol %d does not match berth's %d; the sandbox runs a different berth-agent (rebuild the image or restart the sandbox)", h.Protocol, wire.ProtocolVersion)
	}
	if h.Status != "ok" {
		return h, errdefs.Unavailable("sandbox agent reports status %q", h.Status)
	}
	return h, nil
}

// WaitReady polls Health until it succeeds or ctx ends. It runs right after
// a container starts, so it polls fast: 0.5 ms at first, backing off to
// 10 ms. A protocol mismatch or a planted socket ends it at once.
func (c *Client) WaitReady(ctx context.Context) error {
	delay := 500 * time.Microsecond
	var last error
	for {
		_, err := c.Health(ctx)
		if err == nil {
			return nil
		}
		if errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
			return err
		}
		last = err
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errdefs.Unavailable("sandbox agent did not become ready: %w (last error: %w)", ctx.Err(), last)
		case <-t.C:
		}
		if delay *= 2; delay > 10*time.Millisecond {
			delay = 10 * time.Millisecond
		}
	}
}

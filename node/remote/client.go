package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/outpipe"
	"github.com/berth-sh/berth/node"
)

// Client is a node.Node on another machine: the control plane's side of
// this package's protocol. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

var _ node.Node = (*Client)(nil)

// NewClient returns a Client for the node served at baseURL (such as
// "http://10.0.0.5:7070"; the routes live under Prefix) with the cluster
// credential token. hc carries the requests (its Transport's dialer and
// TLS configuration also carry agent tunnels); nil is a client with pooled
// connections and no overall timeout, as exec streams and tunnels are long.
// A baseURL that does not parse makes every call fail with invalid
// argument.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			Proxy:                 nil, // node traffic is never proxied
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 5 * time.Minute, // a Start pulls and unpacks
			DisableCompression:    true,
		}}
	}
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		u = nil
	}
	return &Client{base: u, token: token, hc: hc}
}

func (c *Client) url(path string) (string, error) {
	if c.base == nil {
		return "", errdefs.InvalidArgument("node client: base URL must be http(s)://host[:port]")
	}
	return c.base.String() + Prefix + path, nil
}

func sandboxPath(name, suffix string) string {
	return "/sandboxes/" + url.PathEscape(name) + suffix
}

// do sends one request and returns the answer when it is 2xx; any other
// answer becomes its errdefs error.
func (c *Client) do(ctx context.Context, method, path string, in any) (*http.Response, error) {
	u, err := c.url(path)
	if err != nil {
		return nil, err
	}
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, errdefs.InvalidArgument("encode node request: %w", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, errdefs.InvalidArgument("build node request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp.StatusCode, resp.Body)
	}
	return resp, nil
}

func (c *Client) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("node call: %w", ctx.Err())
	}
	return errdefs.Unavailable("node %s unreachable: %w", c.base.Host, err)
}

// call is a control call: in as JSON, the answer decoded into out.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.do(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrBody))
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return c.transportError(ctx, err)
	}
	if len(data) > maxAnswer {
		return errdefs.Unavailable("node answer over %d bytes", maxAnswer)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return errdefs.Unavailable("node sent invalid JSON: %w", err)
	}
	return nil
}

func (c *Client) Start(ctx context.Context, name string, o node.StartOptions) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, sandboxPath(name, "/start"), o, nil)
}

func (c *Client) Update(ctx context.Context, name string, o node.StartOptions) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, sandboxPath(name, "/update"), o, nil)
}

func (c *Client) Stop(ctx context.Context, name string, o node.StopOptions) (bool, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return false, err
	}
	var a stopAnswer
	err := c.call(ctx, http.MethodPost, sandboxPath(name, "/stop"), o, &a)
	return a.Stopped, err
}

func (c *Client) Destroy(ctx context.Context, name, reason string) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, sandboxPath(name, "/destroy"), destroyRequest{Reason: reason}, nil)
}

func (c *Client) Status(ctx context.Context, name string) (node.Status, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return node.Status{}, err
	}
	var st node.Status
	if err := c.call(ctx, http.MethodGet, sandboxPath(name, ""), nil, &st); err != nil {
		return node.Status{}, err
	}
	return st, nil
}

func (c *Client) Signal(ctx context.Context, name string, sig int) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, sandboxPath(name, "/signal"), signalRequest{Signal: sig}, nil)
}

func (c *Client) SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPut, sandboxPath(name, "/inactivity-timeout"), timeoutRequest{Timeout: d}, nil)
}

func (c *Client) Snapshot(ctx context.Context, name string, o node.SnapshotOptions) (node.SnapshotHandle, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return node.SnapshotHandle{}, err
	}
	var sn node.SnapshotHandle
	if err := c.call(ctx, http.MethodPost, sandboxPath(name, "/snapshot"), o, &sn); err != nil {
		return node.SnapshotHandle{}, err
	}
	return sn, nil
}

func (c *Client) Images(ctx context.Context) (map[string]string, error) {
	m := map[string]string{}
	if err := c.call(ctx, http.MethodGet, "/images", nil, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *Client) Info(ctx context.Context) (node.Info, error) {
	var in node.Info
	if err := c.call(ctx, http.MethodGet, "/info", nil, &in); err != nil {
		return node.Info{}, err
	}
	return in, nil
}

// Exec starts argv on the node and returns once the node accepted it; the
// output then streams in frames. The process belongs to ctx: cancelling
// it, like Kill, ends the request and so the process on the node.
func (c *Client) Exec(ctx context.Context, name string, argv []string, o node.ExecOptions) (node.Process, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancelCause(ctx)
	resp, err := c.do(pctx, http.MethodPost, sandboxPath(name, "/exec"), execRequest{Argv: argv, Options: o})
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != ExecContentType {
		resp.Body.Close()
		cancel(nil)
		return nil, errdefs.Unavailable("node protocol error: exec answered with content type %q", ct)
	}
	p := &process{stdout: outpipe.New(maxPipe), stderr: outpipe.New(maxPipe), cancel: cancel, done: make(chan struct{})}
	go p.read(pctx, resp.Body)
	return p, nil
}

var (
	errKilled  = errors.New("exec killed")
	errStalled = errors.New("node exec stream stalled")
)

// process is a remote exec. One goroutine reads the frames into two pipes
// whose writers never block, so a caller may read stdout to its end before
// stderr, or only Wait, as with a local process.
type process struct {
	stdout, stderr *outpipe.Pipe
	cancel         context.CancelCauseFunc
	done           chan struct{}
	code           int
	err            error
}

func (p *process) read(ctx context.Context, body io.ReadCloser) {
	defer func() {
		body.Close()
		p.stdout.Close()
		p.stderr.Close()
		p.cancel(nil)
		close(p.done)
	}()
	p.code = -1
	wd := time.AfterFunc(stallAfter, func() { p.cancel(errStalled) })
	defer wd.Stop()
	var buf []byte
	for {
		t, payload, err := readFrame(body, buf)
		if err != nil {
			switch cause := context.Cause(ctx); {
			case cause == errKilled:
				p.err = fmt.Errorf("exec: %w", context.Canceled)
			case cause == errStalled:
				p.err = errdefs.Unavailable("node sent nothing on an exec stream for %s", stallAfter)
			case ctx.Err() != nil:
				p.err = fmt.Errorf("exec: %w", ctx.Err())
			default:
				p.err = errdefs.Unavailable("node exec stream ended without an exit status: %w", err)
			}
			return
		}
		buf = payload[:0]
		wd.Reset(stallAfter)
		switch t {
		case frameStdout:
			p.stdout.Write(payload)
		case frameStderr:
			p.stderr.Write(payload)
		case frameHeartbeat:
		case frameExit:
			var ex exitPayload
			if json.Unmarshal(payload, &ex) != nil {
				p.err = errdefs.Unavailable("node protocol error: malformed exit frame")
				return
			}
			p.code = ex.Code
			if ex.Error != nil {
				p.err = ex.Error.Err()
			}
			p.drain(body)
			return
		default:
			p.err = errdefs.Unavailable("node protocol error: unknown exec frame %d", t)
			return
		}
	}
}

// drainWait bounds how long the client waits, after the exit frame, for
// the end of the chunked body.
const drainWait = 100 * time.Millisecond

// drain reads the answer's end after the exit frame, so that the
// transport puts the connection back in its pool: a body closed before
// its end costs the connection, and the next exec a new TCP connection
// (on loopback that was most of what a remote exec added). This node
// sends the end in the exit frame's write, so it is normally read at once;
// a node that sends it later gets drainWait, a node that sends more bytes
// loses the connection (a protocol error, but the exec's answer stands).
func (p *process) drain(body io.Reader) {
	t := time.AfterFunc(drainWait, func() { p.cancel(errDrained) })
	defer t.Stop()
	var b [1]byte
	io.ReadFull(body, b[:])
}

var errDrained = errors.New("exec stream: no end after the exit frame")

func (p *process) Stdout() io.Reader { return p.stdout }
func (p *process) Stderr() io.Reader { return p.stderr }

// Kill ends the request; the node kills the process when it sees it go.
func (p *process) Kill() error { p.cancel(errKilled); return nil }

func (p *process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.code, p.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// maxPipe caps what an exec stream holds for a reader that does not keep
// up (as a local exec's output buffer does); beyond it output is dropped.
const maxPipe = 16 << 20

// Agent opens a tunnel to the sandbox's agent at once (so a stopped or
// missing sandbox fails here, and the node does not wake it) and returns
// an agent client whose connections are tunnels: the first is the one
// just opened, further ones (the client pools up to 16) open on demand.
// release closes every tunnel, and with them the node's hold on the
// sandbox: the agent client must not be used after it (a call still
// running fails).
func (c *Client) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return nil, nil, err
	}
	first, err := c.dialAgent(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	t := &tunnels{c: c, name: name, spare: first}
	ag := agentclient.NewDialer("node "+c.base.Host+" sandbox "+name, t.dial)
	var once sync.Once
	release := func() {
		once.Do(func() {
			t.close()
			ag.Close()
		})
	}
	return ag, release, nil
}

package agentclient

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// MaxTerminalMessage bounds one WebSocket message read from the agent (or
// relayed from a user). An honest agent sends at most its 256 KiB
// scrollback in one message; a hostile one must not make the host buffer
// without bound.
const MaxTerminalMessage = 1 << 20

// CreateTerminal starts a terminal (a shell on its own pty).
func (c *Client) CreateTerminal(ctx context.Context, req api.CreateTerminalRequest) (api.Terminal, error) {
	if err := checkTerminal(&req); err != nil {
		return api.Terminal{}, err
	}
	var t api.Terminal
	err := c.call(ctx, http.MethodPost, "/v1/terminals", nil, req, &t, maxErrorBody)
	return t, err
}

// ListTerminals lists the sandbox's terminals, oldest first.
func (c *Client) ListTerminals(ctx context.Context) ([]api.Terminal, error) {
	var l api.TerminalList
	if err := c.call(ctx, http.MethodGet, "/v1/terminals", nil, nil, &l, maxJSONBody); err != nil {
		return nil, err
	}
	return l.Terminals, nil
}

// DeleteTerminal kills a terminal's shell and everything it started, and
// drops its scrollback.
func (c *Client) DeleteTerminal(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/v1/terminals/"+url.PathEscape(id), nil, nil, nil, 0)
}

// AttachOptions says how to attach to a terminal.
type AttachOptions struct {
	// Create starts the terminal when it does not exist (or its shell has
	// exited), sized Cols×Rows (default 80×24).
	Create     bool
	Cols, Rows int
}

// AttachTerminal opens the terminal's WebSocket. Binary messages carry
// terminal bytes both ways; text messages carry api.TerminalControl JSON.
// The agent first sends "ready", then the scrollback, then live output, and
// "exit" when the shell ends. Messages over MaxTerminalMessage close the
// connection. The caller closes the returned Conn.
func (c *Client) AttachTerminal(ctx context.Context, id string, opts AttachOptions) (*websocket.Conn, error) {
	q := url.Values{}
	if opts.Create {
		q.Set("create", "1")
		if opts.Cols > 0 {
			q.Set("cols", strconv.Itoa(opts.Cols))
		}
		if opts.Rows > 0 {
			q.Set("rows", strconv.Itoa(opts.Rows))
		}
	}
	u := endpoint("/v1/terminals/"+url.PathEscape(id)+"/ws", q)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:      c.hc, // the pinned unix-socket dialer
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			// websocket.Dial kept at most 1 KiB of the body.
			return nil, errorFromResponse(resp)
		}
		var kind *errdefs.Error
		if errors.As(err, &kind) {
			return nil, kind
		}
		return nil, c.transportError(ctx, err)
	}
	conn.SetReadLimit(MaxTerminalMessage)
	return conn, nil
}

func checkTerminal(req *api.CreateTerminalRequest) error {
	for _, s := range []string{req.ID, req.Shell, req.User} {
		if err := validText(s); err != nil {
			return err
		}
	}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			return err
		}
	}
	for k, v := range req.Env {
		if err := validText(k + v); err != nil {
			return err
		}
	}
	return nil
}

// ProxyTerminal relays a user's terminal WebSocket to the agent's and back,
// message by message, preserving message types, until either side closes or
// ctx ends. A close status from one side is passed on to the other. Each
// message is bounded by MaxTerminalMessage in both directions: the agent is
// untrusted, and an oversized message from it ends the relay with an
// Unavailable error (the user's socket is closed with status 1011).
//
// It returns nil when either side closed normally.
func ProxyTerminal(ctx context.Context, userConn, agentConn *websocket.Conn) error {
	userConn.SetReadLimit(MaxTerminalMessage)
	agentConn.SetReadLimit(MaxTerminalMessage)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		agentSide bool // the failing connection is the agent's
		write     bool // it failed as we wrote to it, not as we read it
		err       error
	}
	done := make(chan result, 2)
	relay := func(src, dst *websocket.Conn, fromAgent bool) {
		for {
			typ, p, err := src.Read(ctx)
			if err != nil {
				done <- result{agentSide: fromAgent, err: err}
				return
			}
			if err := dst.Write(ctx, typ, p); err != nil {
				done <- result{agentSide: !fromAgent, write: true, err: err}
				return
			}
		}
	}
	go relay(agentConn, userConn, true)
	go relay(userConn, agentConn, false)
	first := <-done
	pending := 1 // results still to collect
	if first.write {
		// A write fails when the peer has just closed; the reader of the
		// same connection then holds the close status that says why
		// (a normal closure is not a failure). It is already on its way.
		select {
		case r := <-done:
			pending--
			if r.agentSide == first.agentSide && !r.write {
				first = r
			}
		case <-time.After(time.Second):
		}
	}

	src, dst := userConn, agentConn
	if first.agentSide {
		src, dst = agentConn, userConn
	}
	var out error
	status := websocket.CloseStatus(first.err)
	switch {
	case first.agentSide && errors.Is(first.err, websocket.ErrMessageTooBig):
		dst.Close(websocket.StatusInternalError, "sandbox agent sent an oversized message")
		out = errdefs.Unavailable("sandbox agent sent a terminal message over %d bytes", MaxTerminalMessage)
	case status != -1:
		// Pass the peer's close on (reason trimmed to fit a control
		// frame).
		var reason string
		if ce := (websocket.CloseError{}); errors.As(first.err, &ce) {
			reason = ce.Reason
		}
		if len(reason) > 120 {
			reason = reason[:120]
		}
		dst.Close(status, reason)
		if status != websocket.StatusNormalClosure && status != websocket.StatusGoingAway {
			out = errdefs.Unavailable("terminal closed with status %d: %s", status, reason)
		}
	case ctx.Err() != nil:
		dst.Close(websocket.StatusGoingAway, "")
		out = ctx.Err()
	default:
		dst.Close(websocket.StatusInternalError, "the other side went away")
		who := "user"
		if first.agentSide {
			who = "sandbox agent"
		}
		out = errdefs.Unavailable("terminal relay: %s connection failed: %w", who, first.err)
	}
	src.CloseNow()
	cancel()
	for ; pending > 0; pending-- {
		<-done
	}
	return out
}

// validText refuses strings JSON cannot carry unchanged or the agent would
// refuse.
func validText(s string) error {
	if !utf8.ValidString(s) {
		return errdefs.InvalidArgument("%q is not valid UTF-8", s)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return errdefs.InvalidArgument("%q contains a NUL byte", s)
	}
	return nil
}

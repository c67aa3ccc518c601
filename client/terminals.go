package client

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// MaxTerminalMessage bounds one WebSocket message read from a terminal. The
// largest honest message is the 256 KiB scrollback replay.
const MaxTerminalMessage = 1 << 20

func terminalPath(sandbox, id string, rest ...string) string {
	return sandboxPath(sandbox, append([]string{"terminals", url.PathEscape(id)}, rest...)...)
}

// CreateTerminal starts a terminal (a shell on its own pty) without
// attaching to it.
func (c *Client) CreateTerminal(ctx context.Context, sandbox string, req api.CreateTerminalRequest) (api.Terminal, error) {
	var t api.Terminal
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "terminals"), nil, req, &t)
	return t, err
}

// ListTerminals lists a sandbox's terminals, oldest first.
func (c *Client) ListTerminals(ctx context.Context, sandbox string) ([]api.Terminal, error) {
	var l api.TerminalList
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "terminals"), nil, nil, &l)
	return l.Terminals, err
}

// DeleteTerminal kills a terminal's shell and everything it started, and
// drops its scrollback.
func (c *Client) DeleteTerminal(ctx context.Context, sandbox, id string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, terminalPath(sandbox, id), nil, nil, nil)
	return err
}

// AttachTerminal opens terminal id's WebSocket, starting the terminal
// (sized cols×rows; 0 for the default 80×24) if it does not exist or its
// shell has exited. Binary messages carry terminal bytes both ways; text
// messages carry api.TerminalControl JSON: send {"type":"resize"}; receive
// "ready", then the scrollback, then live output, and "exit" when the
// shell ends. ctx bounds the handshake; the caller closes the Conn.
func (c *Client) AttachTerminal(ctx context.Context, sandbox, id string, cols, rows int) (*websocket.Conn, error) {
	q := url.Values{"create": {"1"}}
	if cols > 0 {
		q.Set("cols", strconv.Itoa(cols))
	}
	if rows > 0 {
		q.Set("rows", strconv.Itoa(rows))
	}
	p := terminalPath(sandbox, id, "ws")
	if err := checkPath(p); err != nil {
		return nil, err
	}
	u := c.base + p + "?" + q.Encode()
	conn, res, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:      c.wsHTTPClient(),
		HTTPHeader:      http.Header{"Authorization": {c.auth}},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols && res.Body != nil {
			return nil, decodeError(res) // the library kept up to 1 KiB of it
		}
		if ctx.Err() != nil {
			return nil, c.transportError(ctx, err)
		}
		return nil, errdefs.Unavailable("terminal %q of %q: WebSocket handshake with %s failed: %w", id, sandbox, c.base, err)
	}
	conn.SetReadLimit(MaxTerminalMessage)
	return conn, nil
}

// wsHTTPClient is the client's HTTP client made fit for a WebSocket
// handshake, which needs HTTP/1.1: an upgrade cannot happen on an HTTP/2
// connection that ALPN would otherwise pick for https.
func (c *Client) wsHTTPClient() *http.Client {
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok {
		return c.hc
	}
	tr = tr.Clone()
	tr.ForceAttemptHTTP2 = false
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if tr.TLSClientConfig != nil {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	hc := *c.hc
	hc.Transport = tr
	return &hc
}

package agentclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxTunnelHead bounds the agent's answer to a tunnel request. An honest
// agent answers in about 80 bytes (or a small JSON error); a hostile one
// must not make the host buffer a gigabyte of header.
const maxTunnelHead = 16 << 10

// DialPort opens a byte stream to TCP port inside the sandbox, as if the
// host had connected to 127.0.0.1:port in the sandbox's own network
// namespace. It goes over the agent's unix socket, so it works for services
// bound to loopback only and for sandboxes with networking off. Each call
// is one new tunnel; the caller closes it.
//
// When nothing listens on the port the error is errdefs.Unavailable with
// the agent's message ("nothing is listening on port N in the sandbox").
// The handshake is bounded by ctx and by CallTimeout; once it returns, the
// connection has no deadline and ctx no longer matters.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, errdefs.InvalidArgument("port %d must be from 1 to 65535", port)
	}
	conn, err := c.tr.DialContext(ctx, "unix", "agent") // the pinned dialer
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	tunnel, err := c.forwardHandshake(ctx, conn, port)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return tunnel, nil
}

func (c *Client) forwardHandshake(ctx context.Context, conn net.Conn, port int) (net.Conn, error) {
	conn.SetDeadline(time.Now().Add(c.callTimeout()))
	// A cancelled ctx unblocks the handshake by expiring the deadline.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := fmt.Sprintf("GET /v1/forward?port=%d HTTP/1.1\r\nHost: agent\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", port, wire.ForwardProtocol)
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, c.tunnelError(ctx, port, err)
	}
	lr := &io.LimitedReader{R: conn, N: maxTunnelHead}
	br := bufio.NewReaderSize(lr, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if lr.N == 0 {
			return nil, errdefs.Unavailable("sandbox agent's answer to a port tunnel request exceeds %d bytes", maxTunnelHead)
		}
		return nil, c.tunnelError(ctx, port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, errorFromResponse(resp)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), wire.ForwardProtocol) {
		return nil, errdefs.Unavailable("sandbox agent switched to protocol %q, not %q", resp.Header.Get("Upgrade"), wire.ForwardProtocol)
	}
	if !stop() {
		// ctx ended while the answer arrived; the deadline is expired.
		return nil, c.transportError(ctx, ctx.Err())
	}
	conn.SetDeadline(time.Time{})
	// The service may speak first (SSH, SMTP, databases): its first bytes
	// can already sit in br behind the 101.
	var early []byte
	if n := br.Buffered(); n > 0 {
		p, _ := br.Peek(n)
		early = append([]byte(nil), p...)
	}
	return &tunnelConn{Conn: conn, early: early}, nil
}

// tunnelError explains a failure during the handshake.
func (c *Client) tunnelError(ctx context.Context, port int, err error) error {
	if ctx.Err() != nil {
		return c.transportError(ctx, err)
	}
	var ne net.Error
	if errdefs.Kind(err) == nil && errors.As(err, &ne) && ne.Timeout() { // a kind already explains it
		return errdefs.Unavailable("sandbox agent did not answer the tunnel request for port %d within %s", port, c.callTimeout())
	}
	return errdefs.Unavailable("port tunnel to port %d: %w", port, err)
}

// tunnelConn is the agent connection after the 101, with any bytes that
// were read past the response head served first.
type tunnelConn struct {
	net.Conn
	early []byte
}

func (t *tunnelConn) Read(p []byte) (int, error) {
	if len(t.early) > 0 {
		n := copy(p, t.early)
		t.early = t.early[n:]
		return n, nil
	}
	return t.Conn.Read(p)
}

// CloseWrite half-closes the tunnel; the agent passes it on to the service
// as EOF.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errdefs.FailedPrecondition("port tunnel: the connection cannot be half-closed")
}

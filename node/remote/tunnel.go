package remote

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// tunnels feeds one agent client: a spare tunnel opened by Agent, then new
// ones; none once released. It tracks every tunnel it handed out, so that
// release closes them all: one left in the client's idle pool would hold
// the sandbox busy on the node until the pool's idle timeout.
type tunnels struct {
	c    *Client
	name string

	mu       sync.Mutex
	spare    net.Conn
	open     map[*trackedConn]struct{}
	released bool
}

func (t *tunnels) dial(ctx context.Context) (net.Conn, error) {
	t.mu.Lock()
	if t.released {
		t.mu.Unlock()
		return nil, errdefs.FailedPrecondition("agent of sandbox %q was released", t.name)
	}
	conn := t.spare
	t.spare = nil
	t.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = t.c.dialAgent(ctx, t.name); err != nil {
			return nil, err
		}
	}
	tc := &trackedConn{Conn: conn, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.released { // released while this one was dialling
		conn.Close()
		return nil, errdefs.FailedPrecondition("agent of sandbox %q was released", t.name)
	}
	if t.open == nil {
		t.open = map[*trackedConn]struct{}{}
	}
	t.open[tc] = struct{}{}
	return tc, nil
}

func (t *tunnels) close() {
	t.mu.Lock()
	t.released = true
	conns := make([]net.Conn, 0, len(t.open)+1)
	if t.spare != nil {
		conns = append(conns, t.spare)
		t.spare = nil
	}
	for tc := range t.open {
		conns = append(conns, tc.Conn)
	}
	t.open = nil
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn leaves its tunnels' set when closed.
type trackedConn struct {
	net.Conn
	t *tunnels
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.open, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite passes a half-close on to the tunnel.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errdefs.FailedPrecondition("agent tunnel: the connection cannot be half-closed")
}

// handshakeTimeout bounds a tunnel's dial and Upgrade when ctx does not.
const handshakeTimeout = 30 * time.Second

// dialAgent opens one connection to the node and upgrades it to a byte
// tunnel to the sandbox's agent. It dials with hc's transport's dialer
// and TLS configuration when it has them, so a tunnel goes where the
// control calls go.
func (c *Client) dialAgent(ctx context.Context, name string) (net.Conn, error) {
	if c.base == nil {
		_, err := c.url("")
		return nil, err
	}
	host := c.base.Host
	if c.base.Port() == "" {
		if c.base.Scheme == "https" {
			host = net.JoinHostPort(c.base.Hostname(), "443")
		} else {
			host = net.JoinHostPort(c.base.Hostname(), "80")
		}
	}
	dial := (&net.Dialer{}).DialContext
	var tlsConf *tls.Config
	if tr, ok := c.hc.Transport.(*http.Transport); ok {
		if tr.DialContext != nil {
			dial = tr.DialContext
		}
		tlsConf = tr.TLSClientConfig
	}
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	raw, err := dial(hctx, "tcp", host)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	conn := raw
	if c.base.Scheme == "https" {
		conf := &tls.Config{}
		if tlsConf != nil {
			conf = tlsConf.Clone()
		}
		if conf.ServerName == "" {
			conf.ServerName = c.base.Hostname()
		}
		tc := tls.Client(raw, conf)
		if err := tc.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, c.transportError(ctx, err)
		}
		conn = tc
	}
	tun, err := c.upgrade(hctx, conn, name)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, c.transportError(ctx, ctx.Err())
		}
		return nil, err
	}
	return tun, nil
}

func (c *Client) upgrade(ctx context.Context, conn net.Conn, name string) (net.Conn, error) {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	// A cancelled ctx unblocks the handshake by expiring the deadline.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := fmt.Sprintf("GET %s%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
		Prefix, sandboxPath(name, "/agent"), c.base.Host, c.token, AgentProtocol)
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, errdefs.Unavailable("node %s: agent tunnel: %w", c.base.Host, err)
	}
	lim := &liftableLimit{r: conn, n: maxHead}
	br := bufio.NewReaderSize(lim, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, errdefs.Unavailable("node %s: agent tunnel answer: %w", c.base.Host, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, decodeError(resp.StatusCode, resp.Body)
	}
	if !headerHasToken(resp.Header, "Connection", "upgrade") || resp.Header.Get("Upgrade") != AgentProtocol {
		return nil, errdefs.Unavailable("node %s: agent tunnel: the node switched to %q", c.base.Host, resp.Header.Get("Upgrade"))
	}
	stop()
	conn.SetDeadline(time.Time{})
	lim.lift()
	return &tunnelConn{Conn: conn, r: br}, nil
}

// liftableLimit bounds the response head; after the 101 it lets the
// agent's bytes through unbounded.
type liftableLimit struct {
	r io.Reader
	n int64 // < 0: no limit
}

func (l *liftableLimit) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errdefs.Unavailable("node agent tunnel: response head over %d bytes", maxHead)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func (l *liftableLimit) lift() { l.n = -1 }

// tunnelConn is the node connection after the 101; bytes read past the
// response head come first, from r.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnelConn) Read(p []byte) (int, error) { return t.r.Read(p) }

// CloseWrite half-closes the tunnel; the node passes it on to the agent.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errdefs.FailedPrecondition("agent tunnel: the connection cannot be half-closed")
}

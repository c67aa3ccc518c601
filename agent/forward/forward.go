package forward

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// dialTimeout bounds the loopback dial. A refused loopback connect
// fails at once; this only matters when a listener's backlog is full.
const dialTimeout = 5 * time.Second

// Tunnels tracks the open tunnels of one agent so that its shutdown can end
// them: hijacked connections are invisible to http.Server.Shutdown.
type Tunnels struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// New returns an empty set of tunnels.
func New() *Tunnels {
	return &Tunnels{conns: map[net.Conn]struct{}{}}
}

// parsePort accepts a decimal TCP port 1-65535 and nothing else: no sign,
// no leading zeros, no spaces (strconv.Atoi alone would take "+80").
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, errdefs.InvalidArgument("port %q must be a number from 1 to 65535", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, errdefs.InvalidArgument("port %q must be a number from 1 to 65535", s)
	}
	return n, nil
}

// headerHas reports whether a comma-separated header holds tok.
func headerHas(h http.Header, name, tok string) bool {
	for _, v := range h.Values(name) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), tok) {
				return true
			}
		}
	}
	return false
}

// dialLoopback connects to port on the sandbox's loopback, IPv4 first.
func dialLoopback(r *http.Request, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	p := strconv.Itoa(port)
	c, err := d.DialContext(r.Context(), "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return c, nil
	}
	c, err6 := d.DialContext(r.Context(), "tcp6", net.JoinHostPort("::1", p))
	if err6 == nil {
		return c, nil
	}
	return nil, errdefs.Unavailable("nothing is listening on port %d in the sandbox", port)
}

// Handle serves GET /v1/forward.
func (t *Tunnels) Handle(w http.ResponseWriter, r *http.Request) {
	port, err := parsePort(r.URL.Query().Get("port"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", wire.ForwardProtocol) {
		httpio.WriteError(w, errdefs.InvalidArgument("the port tunnel needs \"Connection: Upgrade\" and \"Upgrade: %s\"", wire.ForwardProtocol))
		return
	}
	up, err := dialLoopback(r, port)
	if err != nil {
		// 502, not the 503 that unavailable maps to: the agent is fine,
		// the thing behind it is not (a gateway error).
		httpio.WriteJSON(w, http.StatusBadGateway, api.ErrorBody(err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		httpio.WriteError(w, errdefs.Internal("port tunnel: hijack: %w", err))
		return
	}
	// The server's header deadline may still be armed on the connection.
	conn.SetDeadline(time.Time{})
	if !t.add(conn, up) {
		conn.Close()
		up.Close()
		return
	}
	defer t.remove(conn, up)
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.ForwardProtocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		up.Close()
		return
	}
	// Bytes the client sent right behind its request are already in the
	// server's read buffer; they belong to the tunnel.
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		if _, err := up.Write(early); err != nil {
			conn.Close()
			up.Close()
			return
		}
	}
	spliceConns(conn, up)
}

func (t *Tunnels) add(cs ...net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	for _, c := range cs {
		t.conns[c] = struct{}{}
	}
	return true
}

func (t *Tunnels) remove(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
	}
}

// CloseAll ends every open tunnel and refuses new ones.
func (t *Tunnels) CloseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
}

type closeWriter interface{ CloseWrite() error }

// spliceConns relays bytes between a and b until both directions end, then
// closes both. EOF on one side is passed on as a half-close so protocols
// that shut down their sending side first keep working; an error on either
// side ends the whole tunnel at once.
func spliceConns(a, b net.Conn) {
	done := make(chan struct{}, 2)
	relay := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		if _, err := io.Copy(dst, src); err != nil {
			a.Close()
			b.Close()
			return
		}
		if cw, ok := dst.(closeWriter); ok {
			if cw.CloseWrite() == nil {
				return
			}
		}
		a.Close()
		b.Close()
	}
	go relay(a, b)
	relay(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}

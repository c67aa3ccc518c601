package agent

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The port tunnel. GET /v1/forward?port=N with "Connection: Upgrade" and
// "Upgrade: berth-tcp" makes the agent dial 127.0.0.1:N (then [::1]:N)
// from inside the sandbox and, on success, answer 101 Switching Protocols
// and relay bytes both ways on the same connection until either side
// closes. The host's preview proxy uses it so that services bound to
// loopback inside the sandbox are reachable, and so that preview URLs work
// with the sandbox's networking off: the bytes travel over the agent's
// unix socket, not over the sandbox's network.
//
// Only loopback is ever dialed: the agent must not become a way for the
// host (or whoever drives it) to reach other addresses from the sandbox's
// network namespace.

// ForwardProtocol is the Upgrade token of the port tunnel.
const ForwardProtocol = "berth-tcp"

// forwardDialTimeout bounds the loopback dial. A refused loopback connect
// fails at once; this only matters when a listener's backlog is full.
const forwardDialTimeout = 5 * time.Second

// forwardTunnels tracks open tunnels so that Shutdown can end them: hijacked
// connections are invisible to http.Server.Shutdown.
type forwardTunnels struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// addForwardRoutes registers the port tunnel. It needs s.http.
func (s *Server) addForwardRoutes() {
	t := &forwardTunnels{conns: map[net.Conn]struct{}{}}
	s.http.RegisterOnShutdown(t.closeAll)
	s.mux.HandleFunc("GET /v1/forward", t.handleForward)
}

// parseForwardPort accepts a decimal TCP port 1-65535 and nothing else: no sign,
// no leading zeros, no spaces (strconv.Atoi alone would take "+80").
func parseForwardPort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, errdefs.InvalidArgument("port %q must be a number from 1 to 65535", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, errdefs.InvalidArgument("port %q must be a number from 1 to 65535", s)
	}
	return n, nil
}

// forwardHeaderHas reports whether a comma-separated header holds tok.
func forwardHeaderHas(h http.Header, name, tok string) bool {
	for _, v := range h.Values(name) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), tok) {
				return true
			}
		}
	}
	return false
}

// dialForwardLoopback connects to port on the sandbox's loopback, IPv4 first.
func dialForwardLoopback(r *http.Request, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: forwardDialTimeout}
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

func (t *forwardTunnels) handleForward(w http.ResponseWriter, r *http.Request) {
	port, err := parseForwardPort(r.URL.Query().Get("port"))
	if err != nil {
		writeError(w, err)
		return
	}
	if !forwardHeaderHas(r.Header, "Connection", "upgrade") || !forwardHeaderHas(r.Header, "Upgrade", ForwardProtocol) {
		writeError(w, errdefs.InvalidArgument("the port tunnel needs \"Connection: Upgrade\" and \"Upgrade: %s\"", ForwardProtocol))
		return
	}
	up, err := dialForwardLoopback(r, port)
	if err != nil {
		// 502, not the 503 that unavailable maps to: the agent is fine,
		// the thing behind it is not (a gateway error).
		writeJSON(w, http.StatusBadGateway, api.ErrorBody(err))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		writeError(w, errdefs.Internal("port tunnel: hijack: %v", err))
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
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ForwardProtocol + "\r\n\r\n")
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

func (t *forwardTunnels) add(cs ...net.Conn) bool {
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

func (t *forwardTunnels) remove(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
	}
}

func (t *forwardTunnels) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
}

type forwardCloseWriter interface{ CloseWrite() error }

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
		if cw, ok := dst.(forwardCloseWriter); ok {
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

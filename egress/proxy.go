package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
)

const (
	helloTimeout = 10 * time.Second // for the first request line or ClientHello
	dialTimeout  = 10 * time.Second
	maxHead      = 1 << 20 // bytes read to find a Host header or an SNI
)

func (m *Manager) serveProxy(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go m.accept(c.(*net.TCPConn))
	}
}

func (m *Manager) accept(c *net.TCPConn) {
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	sb := m.bySource(src.Addr())
	dst, err := originalDst(c)
	if sb == nil || err != nil {
		c.Close()
		return
	}
	m.handle(c, sb, dst)
}

// handle serves one connection from sandbox sb that was headed for dst.
func (m *Manager) handle(c net.Conn, sb *sandbox, dst netip.AddrPort) {
	cc := &countConn{Conn: c}
	defer cc.Close()
	if n := sb.active.Add(1); n > int64(m.cfg.MaxConns) {
		sb.active.Add(-1)
		resetOnClose(cc)
		m.record(sb.name, api.EgressEvent{Kind: m.portKind(dst.Port()), IP: dst.Addr().String(), Port: int(dst.Port()),
			Rule: "limit", Reason: fmt.Sprintf("more than %d connections at once", m.cfg.MaxConns)})
		return
	}
	defer sb.active.Add(-1)
	switch m.portKind(dst.Port()) {
	case api.EgressHTTP:
		m.handleHTTP(cc, sb, dst)
	case api.EgressTLS:
		m.handleTLS(cc, sb, dst)
	default:
		m.handleTCP(cc, sb, dst)
	}
}

// portKind says how a destination port is matched: HTTP by Host on 80,
// TLS by SNI on 443, other TCP by address.
func (m *Manager) portKind(port uint16) string {
	if m.testPorts != nil {
		return m.testPorts(port)
	}
	switch port {
	case 80:
		return api.EgressHTTP
	case 443:
		return api.EgressTLS
	}
	return api.EgressTCP
}

// decide applies a policy, unless the test-only switch turns it off.
func (m *Manager) decide(p *Policy, host string, ip netip.Addr, port uint16) Decision {
	if weaken.Off(weaken.EgressPolicy) {
		return Decision{true, "weakened"}
	}
	return p.Decide(host, ip, port)
}

// route decides a connection to host (a name, an IP literal, or "") that
// the sandbox addressed to dst, and picks the address to connect to:
//
//   - an IP literal or no name: that address (policy by address);
//   - a name: dst if berth's resolver gave it to this sandbox for that
//     name (pinned), else an address the proxy resolves for the name now.
//
// Whatever is picked must pass the blocklist.
func (m *Manager) route(ctx context.Context, sb *sandbox, host string, dst netip.AddrPort) (netip.AddrPort, Decision) {
	port := dst.Port()
	dec := m.decide(sb.policy(), host, dst.Addr(), port)
	if !dec.Allowed {
		return netip.AddrPort{}, dec
	}
	target := dst.Addr()
	if a, err := netip.ParseAddr(host); err == nil {
		target = a.Unmap()
	} else if host != "" && !weaken.Off(weaken.EgressPin) && !sb.pinned(host, dst.Addr()) {
		addrs, ttl, err := m.lookupA(ctx, host)
		var bl errBlocked
		switch {
		case errors.As(err, &bl):
			return netip.AddrPort{}, Decision{false, bl.why}
		case err != nil:
			return netip.AddrPort{}, Decision{false, "resolve:" + err.Error()}
		case len(addrs) == 0:
			return netip.AddrPort{}, Decision{false, "resolve:no address"}
		}
		sb.pin(host, addrs, ttl)
		target = addrs[0]
	}
	if why := m.bl.Blocked(target); why != "" {
		return netip.AddrPort{}, Decision{false, why}
	}
	return netip.AddrPortFrom(target, port), dec
}

// handleTCP carries other TCP, matched by address and port, and by the
// names berth's resolver gave this sandbox for that address: a rule like
// "git.example.com:22" admits SSH to the addresses the name resolved to,
// and a denied name is denied on every port.
func (m *Manager) handleTCP(c *countConn, sb *sandbox, dst netip.AddrPort) {
	ev := api.EgressEvent{Kind: api.EgressTCP, IP: dst.Addr().String(), Port: int(dst.Port())}
	pol := sb.policy()
	dec := m.decide(pol, "", dst.Addr(), dst.Port())
	host := ""
	for _, name := range sb.namesFor(dst.Addr()) {
		d := m.decide(pol, name, dst.Addr(), dst.Port())
		if !d.Allowed && strings.HasPrefix(d.Rule, "deny:") {
			dec, host = d, name
			break
		}
		if d.Allowed && !dec.Allowed {
			dec, host = d, name
		}
	}
	ev.Host = host
	target := dst
	if dec.Allowed {
		if why := m.bl.Blocked(dst.Addr()); why != "" {
			dec = Decision{false, why}
		}
	}
	m.carry(c, sb, host, target, dec, nil, ev)
}

// handleHTTP matches plain HTTP by its Host header. The connection goes
// to the first request's host; each later request on it must name the
// same host, or the connection is closed (the client opens a new one,
// which is decided afresh). Requests are re-written upstream as parsed,
// bodies streamed; after an Upgrade or CONNECT the bytes pass as they are.
func (m *Manager) handleHTTP(c *countConn, sb *sandbox, dst netip.AddrPort) {
	ev := api.EgressEvent{Kind: api.EgressHTTP, IP: dst.Addr().String(), Port: int(dst.Port())}
	lim := &headLimit{r: c, left: maxHead}
	br := bufio.NewReader(lim)
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	req, err := http.ReadRequest(br)
	_ = c.SetReadDeadline(time.Time{})
	lim.left = bodyLimit
	if err != nil {
		ev.Rule, ev.Reason = "malformed", "no HTTP request"
		m.record(sb.name, ev)
		return
	}
	host := NormalizeHost(req.Host)
	ev.Host = host
	if host == "" {
		ev.Rule, ev.Reason = "malformed", "no usable Host header"
		m.record(sb.name, ev)
		refuse(c, http.StatusBadRequest, "berth egress: request has no usable Host header")
		return
	}
	target, dec := m.route(context.Background(), sb, host, dst)
	if !dec.Allowed {
		// Which range or host network matched stays in the audit log.
		why := dec.Rule
		if strings.HasPrefix(why, "blocked:") {
			why = "a destination no sandbox may reach"
		}
		refuse(c, http.StatusForbidden, fmt.Sprintf("berth egress: %s is not allowed (%s)", host, why))
		m.carry(c, sb, host, target, dec, nil, ev)
		return
	}
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() {
		err := m.relayRequests(sb, c, br, lim, req, host, target, pw)
		pw.CloseWithError(err)
		if errors.Is(err, errHostChanged) {
			c.Close()
		}
	}()
	m.carry(c, sb, host, target, dec, pr, ev)
}

var errHostChanged = errors.New("request for another host on this connection")

const bodyLimit = 1 << 62

// relayRequests writes req and then each following request on the
// connection to w, as long as they name host.
func (m *Manager) relayRequests(sb *sandbox, c net.Conn, br *bufio.Reader, lim *headLimit, req *http.Request, host string, target netip.AddrPort, w io.Writer) error {
	for {
		upgrade := req.Method == http.MethodConnect || req.Header.Get("Upgrade") != ""
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{} // no Go default added
		}
		if err := req.Write(w); err != nil {
			return err
		}
		if upgrade {
			_, err := io.Copy(w, br)
			return err
		}
		lim.left = maxHead
		next, err := http.ReadRequest(br)
		lim.left = bodyLimit
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if h := NormalizeHost(next.Host); h != host {
			m.record(sb.name, api.EgressEvent{Kind: api.EgressHTTP, Host: h, IP: target.Addr().String(), Port: int(target.Port()),
				Rule: "host-changed", Reason: "a request for " + h + " on a connection to " + host})
			return errHostChanged
		}
		req = next
	}
}

// headLimit bounds what a request head may take; bodies get bodyLimit.
type headLimit struct {
	r    io.Reader
	left int64
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errors.New("request head too large")
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func refuse(c net.Conn, code int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// handleTLS peeks the ClientHello's SNI; hosts with injection rules are
// intercepted, others are tunnelled without decryption.
func (m *Manager) handleTLS(c *countConn, sb *sandbox, dst netip.AddrPort) {
	ev := api.EgressEvent{Kind: api.EgressTLS, IP: dst.Addr().String(), Port: int(dst.Port())}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	sni, hello, err := peekSNI(&io.LimitedReader{R: c, N: maxHead})
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		ev.Rule, ev.Reason = "malformed", "no TLS ClientHello"
		m.record(sb.name, ev)
		return
	}
	host := NormalizeHost(sni)
	ev.Host = host
	target, dec := m.route(context.Background(), sb, host, dst)
	pc := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(hello), c)}
	if dec.Allowed && host != "" && sb.policy().InjectFor(host) != nil {
		ev.Kind = api.EgressHTTPS
		m.intercept(pc, c, sb, host, target, dec, ev)
		return
	}
	m.carry(c, sb, host, target, dec, pc, ev)
}

// carry connects to target and copies both ways, recording the decision
// and the bytes. in, when set, is what to read from the sandbox instead
// of c (bytes already peeked, then c).
func (m *Manager) carry(c *countConn, sb *sandbox, host string, target netip.AddrPort, dec Decision, in io.Reader, ev api.EgressEvent) {
	ev.Allowed, ev.Rule = dec.Allowed, dec.Rule
	if !dec.Allowed {
		if ev.Kind != api.EgressHTTP {
			resetOnClose(c)
		}
		m.record(sb.name, ev)
		return
	}
	ev.IP = target.Addr().String()
	up, err := net.DialTimeout("tcp", target.String(), dialTimeout)
	if err != nil {
		ev.Reason = "connect: " + err.Error()
		resetOnClose(c)
		m.record(sb.name, ev)
		return
	}
	defer up.Close()
	var once sync.Once
	closeBoth := func() { once.Do(func() { c.Close(); up.Close() }) }
	untrack := sb.track(&conn{host: host, ip: target.Addr(), port: target.Port(), close: closeBoth})
	defer untrack()
	if in == nil {
		in = c
	}
	out, back := splice(c, up, in)
	ev.BytesOut, ev.BytesIn = out, back
	m.record(sb.name, ev)
}

// splice copies in → up and up → c until both directions end.
func splice(c net.Conn, up net.Conn, in io.Reader) (out, back int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		back, _ = io.Copy(c, up)
		closeWrite(c)
	}()
	out, _ = io.Copy(up, in)
	closeWrite(up)
	wg.Wait()
	return out, back
}

// resetOnClose makes the coming Close send a RST: a refused or failed
// connection then reads as "connection reset" in the sandbox at once,
// the nearest a transparent proxy gets to "connection refused".
func resetOnClose(c net.Conn) {
	for {
		switch x := c.(type) {
		case *net.TCPConn:
			_ = x.SetLinger(0)
			return
		case interface{ Unwrap() net.Conn }:
			c = x.Unwrap()
		default:
			return
		}
	}
}

func closeWrite(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if x, ok := c.(cw); ok {
		_ = x.CloseWrite()
		return
	}
	if x, ok := c.(interface{ Unwrap() net.Conn }); ok {
		closeWrite(x.Unwrap())
		return
	}
	_ = c.Close()
}

// countConn counts the bytes a sandbox connection carries.
type countConn struct {
	net.Conn
	in, out atomic.Int64 // read from / written to the sandbox
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

func (c *countConn) Unwrap() net.Conn { return c.Conn }

// prefixConn reads r (peeked bytes, then the conn) and writes the conn.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *prefixConn) Unwrap() net.Conn { return p.Conn }

// peekSNI reads a TLS ClientHello from r and returns its server name and
// the bytes read, so they can be replayed to wherever the connection goes.
func peekSNI(r io.Reader) (string, []byte, error) {
	var buf bytes.Buffer
	var sni string
	seen := false
	errDone := errors.New("hello read")
	err := tls.Server(readOnly{io.TeeReader(r, &buf)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, seen = h.ServerName, true
			return nil, errDone
		},
	}).Handshake()
	if !seen {
		return "", nil, fmt.Errorf("read ClientHello: %w", err)
	}
	return sni, buf.Bytes(), nil
}

// readOnly is a net.Conn that can only be read; writes fail, so peeking
// never answers the client.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (readOnly) Write([]byte) (int, error)        { return 0, io.ErrClosedPipe }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return nil }
func (readOnly) RemoteAddr() net.Addr             { return nil }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }

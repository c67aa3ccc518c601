package preview

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/berth-sh/berth/internal/errdefs"
)

// dial is the Transport's DialContext: it opens one new tunnel with the
// dialer of the request that needs a connection. The Transport keeps the
// request's context values (not its cancellation) for dials, so the route
// is always there; addr is checked against it so a pooled key can never be
// served by another exposure's dialer.
func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	rt, _ := ctx.Value(ctxKey{}).(*route)
	if rt == nil || addr != rt.pool+":80" {
		return nil, errdefs.Internal("preview: dial for %q without a matching route", addr)
	}
	sb := rt.exp.Sandbox
	p.mu.Lock()
	if p.count[sb] >= p.cfg.MaxTunnelsPerSandbox {
		p.mu.Unlock()
		return nil, errdefs.ResourceExhausted("sandbox %q already has %d open preview connections; try again later", sb, p.cfg.MaxTunnelsPerSandbox)
	}
	p.count[sb]++
	p.mu.Unlock()

	dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	c, err := rt.dial(dctx)
	if err != nil {
		p.release(sb)
		if errors.Is(dctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, errdefs.New(errdefs.ErrDeadlineExceeded, "opening a tunnel to port %d in sandbox %q took longer than %s", rt.exp.Port, sb, p.cfg.DialTimeout)
		}
		return nil, err
	}
	tc := &trackedConn{Conn: c, p: p, t: target{sb, rt.exp.Port}}
	p.mu.Lock()
	// A Revoke between the lookup and now must still win.
	if p.gen[tc.t] != rt.gen || p.gen[target{sb, 0}] != rt.sgen {
		p.mu.Unlock()
		c.Close()
		p.release(sb)
		return nil, errdefs.NotFound("preview URL was revoked")
	}
	set := p.open[tc.t]
	if set == nil {
		set = map[*trackedConn]struct{}{}
		p.open[tc.t] = set
	}
	set[tc] = struct{}{}
	p.mu.Unlock()
	return tc, nil
}

func (p *Proxy) release(sandbox string) {
	p.mu.Lock()
	if p.count[sandbox]--; p.count[sandbox] <= 0 {
		delete(p.count, sandbox)
	}
	p.mu.Unlock()
}

// Revoke closes every open connection (requests in flight, WebSockets,
// idle pooled ones) to port of sandbox, or to all its ports when port is
// 0. The controller calls it when a port is unexposed or its token
// rotated, and when the sandbox sleeps or is destroyed: new requests are
// refused by the Resolver, and Revoke ends the ones already through.
func (p *Proxy) Revoke(sandbox string, port int) {
	var victims []*trackedConn
	p.mu.Lock()
	p.gen[target{sandbox, port}]++
	for t, set := range p.open {
		if t.sandbox == sandbox && (port == 0 || t.port == port) {
			for c := range set {
				victims = append(victims, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
}

// OpenTunnels reports how many upstream connections into sandbox are open.
func (p *Proxy) OpenTunnels(sandbox string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[sandbox]
}

// trackedConn is one upstream tunnel, registered so Revoke can end it.
type trackedConn struct {
	net.Conn
	p    *Proxy
	t    target
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		p := c.p
		p.mu.Lock()
		if set := p.open[c.t]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(p.open, c.t)
			}
		}
		p.mu.Unlock()
		p.release(c.t.sandbox)
	})
	return err
}

// CloseWrite passes a half-close on to the tunnel when it supports one.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

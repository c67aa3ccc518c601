package local

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/exposure"
	"github.com/berth-sh/berth/store"
)

// ExposePort makes a preview URL for a port, waking the sandbox (an
// explicit request). Exposing again mints a new token, or takes the
// request's: an old URL whose token changed answers 404, and open
// connections end unless the same exposure is repeated in the same run.
// A caller's token is unique per sandbox and port: the URL's host holds
// both, so another sandbox with the same token has another URL.
func (m *Manager) ExposePort(ctx context.Context, name string, req api.ExposePortRequest) (api.ExposedPort, error) {
	if req.Port < 1 || req.Port > 65535 {
		return api.ExposedPort{}, errdefs.InvalidArgument("port %d must be from 1 to 65535", req.Port)
	}
	token := req.Token
	if token == "" {
		token = exposure.NewToken()
	} else if err := exposure.CheckToken(token); err != nil {
		return api.ExposedPort{}, err
	}
	if len(req.Name) > 64 {
		return api.ExposedPort{}, errdefs.InvalidArgument("port name is longer than 64 bytes")
	}
	_, release, err := m.use(ctx, name) // starts or wakes it
	if err != nil {
		return api.ExposedPort{}, err
	}
	release()
	a, err := m.lock(ctx, name)
	if err != nil {
		return api.ExposedPort{}, err
	}
	defer a.mu.Unlock()
	if !a.exists || a.rec.State != api.StateRunning {
		return api.ExposedPort{}, errdefs.FailedPrecondition("sandbox %q stopped while its port was being exposed; try again", name)
	}
	_, had := a.rec.Ports[req.Port]
	e := store.Exposure{Port: req.Port, Name: req.Name, Token: token, Private: req.Private,
		RunID: a.rec.RunID, CreatedAt: time.Now().UTC()}
	if a.rec.Ports == nil {
		a.rec.Ports = map[int]store.Exposure{}
	}
	old := a.rec.Ports[req.Port]
	a.rec.Ports[req.Port] = e
	if err := m.save(ctx, a); err != nil {
		if had {
			a.rec.Ports[req.Port] = old
		} else {
			delete(a.rec.Ports, req.Port)
		}
		return api.ExposedPort{}, err
	}
	same := had && old.Token == e.Token && old.Private == e.Private && old.RunID == e.RunID
	if had && !same && m.cfg.Previews != nil {
		m.cfg.Previews.Revoke(name, req.Port)
	}
	m.journal(ctx, name, "expose-port", fmt.Sprint(req.Port))
	return m.exposedPort(name, e, a.rec.RunID), nil
}

// UnexposePort ends a preview URL and every connection through it.
// Unexposing a port that is not exposed is not an error.
func (m *Manager) UnexposePort(ctx context.Context, name string, port int) error {
	if err := ValidName(name); err != nil {
		return err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return errdefs.NotFound("sandbox %q not found", name)
	}
	if old, ok := a.rec.Ports[port]; ok {
		delete(a.rec.Ports, port)
		if err := m.save(ctx, a); err != nil {
			a.rec.Ports[port] = old
			return err
		}
		m.journal(ctx, name, "unexpose-port", fmt.Sprint(port))
	}
	if m.cfg.Previews != nil {
		m.cfg.Previews.Revoke(name, port)
	}
	return nil
}

// ListPorts lists a sandbox's exposed ports, lowest first. It does not
// wake the sandbox.
func (m *Manager) ListPorts(ctx context.Context, name string) ([]api.ExposedPort, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return nil, errdefs.NotFound("sandbox %q not found", name)
	}
	out := []api.ExposedPort{}
	for _, e := range a.rec.Ports {
		run := a.rec.RunID
		if a.rec.State != api.StateRunning {
			run = ""
		}
		out = append(out, m.exposedPort(name, e, run))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out, nil
}

func (m *Manager) exposedPort(name string, e store.Exposure, currentRun string) api.ExposedPort {
	p := api.ExposedPort{Port: e.Port, Name: e.Name, Private: e.Private, CreatedAt: e.CreatedAt, Status: api.PortStale}
	if e.RunID != "" && e.RunID == currentRun {
		p.Status = api.PortActive
	}
	if m.cfg.PreviewURLs != nil {
		p.URL, p.PathURL = m.cfg.PreviewURLs(toPreview(name, e))
	}
	return p
}

func toPreview(name string, e store.Exposure) exposure.Exposure {
	return exposure.Exposure{Sandbox: name, Port: e.Port, Name: e.Name, Token: e.Token, Private: e.Private, RunID: e.RunID, CreatedAt: e.CreatedAt}
}

// Lookup implements preview.Resolver (whose types are package
// internal/exposure's). It never starts or wakes a sandbox
// (cloudflare/sandbox-sdk #415): a sleeping or restarted sandbox's URL is
// stale (410), a destroyed one's is unknown (404).
func (m *Manager) Lookup(ctx context.Context, name string, port int, token string) (exposure.Exposure, exposure.DialFunc, error) {
	notFound := errdefs.NotFound("no preview URL for port %d of sandbox %q", port, name)
	if ValidName(name) != nil {
		return exposure.Exposure{}, nil, notFound
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return exposure.Exposure{}, nil, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a) // lock made an actor for an unknown name
		return exposure.Exposure{}, nil, notFound
	}
	e, ok := a.rec.Ports[port]
	if !ok || subtle.ConstantTimeCompare([]byte(e.Token), []byte(token)) != 1 {
		return exposure.Exposure{}, nil, notFound
	}
	if a.rec.State != api.StateRunning || a.agent == nil || e.RunID != a.rec.RunID {
		return exposure.Exposure{}, nil, fmt.Errorf("sandbox %q restarted or slept since port %d was exposed: %w", name, port, exposure.ErrStale)
	}
	m.touch(a)
	ag := a.agent
	dial := func(ctx context.Context) (net.Conn, error) {
		c, err := ag.DialPort(ctx, port)
		if err != nil {
			return nil, err
		}
		// An open tunnel (a WebSocket, a stream, or an idle pooled
		// connection for up to a minute) keeps the sandbox awake.
		a.actMu.Lock()
		a.active++
		a.actMu.Unlock()
		return &activeConn{Conn: c, done: func() {
			a.actMu.Lock()
			a.active--
			a.lastActive = time.Now().UTC()
			a.actMu.Unlock()
		}}, nil
	}
	return toPreview(name, e), dial, nil
}

type activeConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *activeConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
)

// Config wires a Manager.
type Config struct {
	// Gateway is the bridge address the proxy and resolver listen on.
	Gateway netip.Addr
	// ProxyPort and DNSPort are the ports they listen on (the network
	// package redirects sandbox traffic there).
	ProxyPort, DNSPort uint16
	// Subnet is the sandbox subnet (always blocked as a destination).
	Subnet netip.Prefix
	// OpenPrivate are private ranges the operator opened.
	OpenPrivate []netip.Prefix
	// Upstream is the DNS server (host:port) names are resolved with.
	Upstream string
	// CADir holds the deployment's egress CA (created on first use).
	CADir string
	// UpstreamRoots verify the real hosts when TLS is re-originated; nil
	// means the system roots.
	UpstreamRoots *x509.CertPool
	// Secret returns a secret's value for injection.
	Secret func(ctx context.Context, name string) (string, bool, error)
	Logf   func(format string, args ...any)
	// LogSize bounds each sandbox's audit log (entries); default 2000.
	LogSize int
	// LogDir, when set, keeps each sandbox's audit log on disk as well
	// (<name>.jsonl, rotated at 4 MiB to <name>.jsonl.1), so it survives
	// a daemon restart.
	LogDir string
	// MaxConns bounds one sandbox's concurrent proxied connections;
	// default 1024. Beyond it new connections are reset (and logged).
	MaxConns int
	// Meter, when set, counts every connection's verdict and the bytes
	// it carried (package metrics implements it).
	Meter Meter
}

// Meter receives one call per proxied connection when it ends (or is
// refused): its verdict and the bytes it carried each way (out: from
// the sandbox). Per-request events of an intercepted connection are not
// counted again.
type Meter interface {
	Egress(allowed bool, out, in int64)
}

// Manager runs the egress proxy and resolver for one daemon.
type Manager struct {
	cfg Config
	bl  *Blocklist
	ca  *CA

	mu     sync.Mutex
	byIP   map[netip.Addr]*sandbox
	byName map[string]*sandbox
	logs   map[string]*auditLog

	closers []func() error

	// testPorts overrides portKind in in-process tests, whose servers
	// listen on ephemeral ports.
	testPorts func(uint16) string
}

type sandbox struct {
	name string
	ip   netip.Addr

	active atomic.Int64 // connections being handled

	mu    sync.Mutex
	pol   *Policy
	pins  map[string]map[netip.Addr]time.Time // name → address → expiry
	conns map[*conn]struct{}
}

// conn is a live proxied connection, re-checked when the policy changes.
type conn struct {
	host  string
	ip    netip.Addr
	port  uint16
	close func()
}

// New loads (or creates) the CA and prepares the blocklist. Start opens
// the listeners.
func New(cfg Config) (*Manager, error) {
	if cfg.LogSize <= 0 {
		cfg.LogSize = 2000
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Secret == nil {
		cfg.Secret = func(context.Context, string) (string, bool, error) { return "", false, nil }
	}
	bl, err := NewBlocklist(cfg.Subnet, cfg.OpenPrivate)
	if err != nil {
		return nil, err
	}
	ca, err := LoadOrCreateCA(cfg.CADir)
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, bl: bl, ca: ca, byIP: map[netip.Addr]*sandbox{}, byName: map[string]*sandbox{}, logs: map[string]*auditLog{}}, nil
}

// Start listens on the gateway: the proxy on ProxyPort (TCP) and the
// resolver on DNSPort (UDP and TCP). It returns once they listen.
func (m *Manager) Start(ctx context.Context) error {
	pa := netip.AddrPortFrom(m.cfg.Gateway, m.cfg.ProxyPort).String()
	ln, err := net.Listen("tcp", pa)
	if err != nil {
		return fmt.Errorf("egress proxy listen %s (berth serve --egress-proxy-port): %w", pa, err)
	}
	m.closers = append(m.closers, ln.Close)
	go m.serveProxy(ln)
	da := netip.AddrPortFrom(m.cfg.Gateway, m.cfg.DNSPort).String()
	closeDNS, _, err := m.serveDNS(da)
	if err != nil {
		m.Close()
		return err
	}
	m.closers = append(m.closers, closeDNS)
	return nil
}

// Close stops the listeners. Proxied connections end with their peers.
func (m *Manager) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c())
	}
	m.closers = nil
	m.mu.Lock()
	for _, l := range m.logs {
		l.close()
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

// CACertPEM is the deployment's egress CA certificate.
func (m *Manager) CACertPEM() []byte { return m.ca.CertPEM() }

// Attach registers a running sandbox at ip with policy p.
func (m *Manager) Attach(name string, ip netip.Addr, p api.NetworkPolicy) error {
	pol, err := Compile(p)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.byName[name]; old != nil {
		delete(m.byIP, old.ip)
		old.closeAll()
	}
	if old := m.byIP[ip]; old != nil {
		delete(m.byName, old.name)
		old.closeAll()
	}
	s := &sandbox{name: name, ip: ip, pol: pol, pins: map[string]map[netip.Addr]time.Time{}, conns: map[*conn]struct{}{}}
	m.byIP[ip], m.byName[name] = s, s
	m.logForLocked(name)
	return nil
}

// SetPolicy replaces a running sandbox's policy. Connections the new
// policy still allows carry on; the others are closed. A sandbox that is
// not attached (sleeping) is not an error: the policy applies at start.
func (m *Manager) SetPolicy(name string, p api.NetworkPolicy) error {
	pol, err := Compile(p)
	if err != nil {
		return err
	}
	s := m.byNameGet(name)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.pol = pol
	var cut []*conn
	for c := range s.conns {
		if !m.decide(pol, c.host, c.ip, c.port).Allowed {
			cut = append(cut, c)
		}
	}
	s.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
	return nil
}

// Detach forgets a sandbox's address (its compute stopped) and closes its
// proxied connections. Its audit log stays until Forget.
func (m *Manager) Detach(name string) {
	m.mu.Lock()
	s := m.byName[name]
	if s != nil {
		delete(m.byName, name)
		if m.byIP[s.ip] == s {
			delete(m.byIP, s.ip)
		}
	}
	m.mu.Unlock()
	if s != nil {
		s.closeAll()
	}
}

// Forget drops a destroyed sandbox's audit log.
func (m *Manager) Forget(name string) {
	m.Detach(name)
	m.mu.Lock()
	l := m.logForLocked(name)
	delete(m.logs, name)
	m.mu.Unlock()
	l.remove()
}

// Log returns up to limit most recent audit events of a sandbox, oldest
// first. An unknown sandbox has an empty log.
func (m *Manager) Log(name string, limit int) []api.EgressEvent {
	m.mu.Lock()
	l := m.logForLocked(name)
	m.mu.Unlock()
	return l.tail(limit)
}

// logForLocked returns name's audit log, loading it from LogDir on first
// use. Callers hold m.mu.
func (m *Manager) logForLocked(name string) *auditLog {
	l := m.logs[name]
	if l == nil {
		l = openAuditLog(m.cfg.LogDir, name, m.cfg.LogSize, m.cfg.Logf)
		m.logs[name] = l
	}
	return l
}

func (m *Manager) byNameGet(name string) *sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byName[name]
}

func (m *Manager) bySource(ip netip.Addr) *sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byIP[ip.Unmap()]
}

func (m *Manager) record(name string, ev api.EgressEvent) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if m.cfg.Meter != nil && ev.Method == "" {
		m.cfg.Meter.Egress(ev.Allowed, ev.BytesOut, ev.BytesIn)
	}
	m.mu.Lock()
	l := m.logs[name]
	m.mu.Unlock()
	if l != nil {
		l.add(ev)
	}
}

func (s *sandbox) policy() *Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pol
}

func (s *sandbox) track(c *conn) (untrack func()) {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}
}

func (s *sandbox) closeAll() {
	s.mu.Lock()
	var cs []*conn
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}

// pin records that name resolved to addrs for this sandbox.
func (s *sandbox) pin(name string, addrs []netip.Addr, ttl time.Duration) {
	if ttl < 5*time.Minute {
		ttl = 5 * time.Minute // outlive short TTLs: clients cache longer
	}
	exp := time.Now().Add(ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.pins[name]
	if set == nil {
		if len(s.pins) > 4096 {
			s.pins = map[string]map[netip.Addr]time.Time{}
		}
		set = map[netip.Addr]time.Time{}
		s.pins[name] = set
	}
	for _, a := range addrs {
		set[a] = exp
	}
}

// namesFor lists the names that resolved to a for this sandbox, recently.
func (s *sandbox) namesFor(a netip.Addr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	now := time.Now()
	for name, set := range s.pins {
		if exp, ok := set[a]; ok && now.Before(exp) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// pinned reports whether name resolved to a for this sandbox, recently.
func (s *sandbox) pinned(name string, a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.pins[name][a]
	return ok && time.Now().Before(exp)
}

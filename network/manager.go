package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Manager owns one bridge, one subnet, one netns directory and one pair of
// nftables tables. It is safe for concurrent use; operations on different
// ids run in parallel.
type Manager struct {
	cfg   Config
	host  netns.NsHandle  // the host netns (to return threads to)
	nl    *netlink.Handle // netlink socket in the host netns
	brIdx int

	nftMu sync.Mutex // one nf_tables batch at a time
	nft   *nftables.Conn
	objs  *nftObjects

	mu    sync.Mutex // guards alloc, sbx, locks, closed
	alloc *allocator
	sbx   map[string]*sandbox
	locks map[string]*idLock

	closed bool
}

type sandbox struct {
	ip       netip.Addr // invalid if the netns has no usable address
	internet bool
	healthy  bool // netns, veth and address all present and as expected
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// New prepares the host side (bridge with the gateway address, IPv4
// forwarding, the netns directory, the nftables tables) and rebuilds its
// view of existing sandboxes from the netns files, so a daemon restart
// neither loses nor double-allocates addresses. It is idempotent.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, alloc: newAllocator(cfg.Subnet), sbx: map[string]*sandbox{}, locks: map[string]*idLock{}}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()

	runtime.LockOSThread()
	m.host, err = netns.Get()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("open host netns: %w", err)
	}
	if m.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	if m.nft, err = nftables.New(nftables.AsLasting()); err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	if err := m.ensureBridge(); err != nil {
		return nil, err
	}
	// Forwarding is what lets sandboxes reach the internet at all; the
	// forward chain decides who may.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("enable ipv4 forwarding: %w", err)
	}
	if err := ensureSharedDir(cfg.NetNSDir); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	wasOn := m.readInternetSet()
	ids, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var inet []netip.Addr
	var ports []portElem
	for _, id := range ids {
		s := m.inspect(id)
		if s.ip.IsValid() {
			if !m.alloc.reserve(s.ip, id) {
				// Two netns claim one address (should not happen); keep
				// the first and mark this one for rebuild on next Setup.
				s.ip, s.healthy = netip.Addr{}, false
			}
		}
		s.internet = s.healthy && wasOn[s.ip]
		m.sbx[id] = s
		if s.healthy {
			ports = append(ports, portElem{hostVethName(cfg.Bridge, id), s.ip})
			if s.internet {
				inet = append(inet, s.ip)
			}
		}
	}
	if err := m.install(inet, ports, weakHoles()); err != nil {
		return nil, err
	}
	ok = true
	return m, nil
}

func (m *Manager) ensureBridge() error {
	br := m.cfg.Bridge
	link, err := m.nl.LinkByName(br)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return fmt.Errorf("look up bridge %s: %w", br, err)
		}
		if err := m.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br, TxQLen: -1}}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create bridge %s: %w", br, err)
		}
		if link, err = m.nl.LinkByName(br); err != nil {
			return fmt.Errorf("look up bridge %s: %w", br, err)
		}
	}
	if link.Type() != "bridge" {
		return errdefs.FailedPrecondition("interface %s exists and is a %s, not a bridge", br, link.Type())
	}
	// The host needs no IPv6 presence on the sandbox segment; best effort
	// (the path is missing when IPv6 is off host-wide).
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+br+"/disable_ipv6", []byte("1"), 0)
	gw := m.alloc.gateway()
	want := &netlink.Addr{IPNet: &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(m.cfg.Subnet.Bits(), 32)}}
	if err := m.nl.AddrReplace(link, want); err != nil {
		return fmt.Errorf("set gateway address %s on %s: %w", gw, br, err)
	}
	if err := m.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up bridge %s: %w", br, err)
	}
	m.brIdx = link.Attrs().Index
	return nil
}

// inspect reads the state of an existing sandbox netns: its eth0 address,
// and whether the host veth exists on our bridge.
func (m *Manager) inspect(id string) *sandbox {
	s := &sandbox{}
	path := m.nsPath(id)
	if !isNetNSFile(path) {
		return s
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return s
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return s
	}
	defer h.Close()
	eth, err := h.LinkByName(sandboxIf)
	if err != nil {
		return s
	}
	addrs, err := h.AddrList(eth, unix.AF_INET)
	if err != nil {
		return s
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if ok && m.cfg.Subnet.Contains(ip) {
			s.ip = ip
			break
		}
	}
	if !s.ip.IsValid() {
		return s
	}
	hv, err := m.nl.LinkByName(hostVethName(m.cfg.Bridge, id))
	s.healthy = err == nil && hv.Attrs().MasterIndex == m.brIdx && hv.Attrs().Alias == vethAlias(m.cfg.Bridge, id)
	return s
}

func (m *Manager) nsPath(id string) string { return filepath.Join(m.cfg.NetNSDir, id) }

func (m *Manager) attachment(id string, s *sandbox) *Attachment {
	return &Attachment{
		NetNSPath: m.nsPath(id),
		IP:        s.ip,
		Gateway:   m.alloc.gateway(),
		HostVeth:  hostVethName(m.cfg.Bridge, id),
		Internet:  s.internet,
	}
}

// lock serialises operations on one id.
func (m *Manager) lock(id string) (func(), error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errdefs.FailedPrecondition("network manager is closed")
	}
	l := m.locks[id]
	if l == nil {
		l = &idLock{}
		m.locks[id] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, id)
		}
		m.mu.Unlock()
	}, nil
}

func (m *Manager) get(id string) *sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sbx[id]
}

func (m *Manager) nftApply(ch elemChange) error {
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	if m.nft == nil {
		return errdefs.FailedPrecondition("network manager is closed")
	}
	return m.applyElems(ch)
}

// List returns the ids that have a netns file, sorted. These are what the
// daemon reconciles against its own records.
func (m *Manager) List(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(m.cfg.NetNSDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list netns dir: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.Type().IsRegular() && validateID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Close releases the manager's sockets. Sandboxes, the bridge and the rules
// stay: they belong to running sandboxes, and the next New adopts them.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	var err error
	if m.nft != nil {
		err = m.nft.CloseLasting()
		m.nft = nil
	}
	if m.nl != nil {
		m.nl.Close()
		m.nl = nil
	}
	if m.host.IsOpen() {
		m.host.Close()
	}
	return err
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// ownedVeths lists host veths carrying this manager's alias, by id.
func (m *Manager) ownedVeths() (map[string][]netlink.Link, error) {
	links, err := m.nl.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list links: %w", err)
	}
	prefix := aliasPrefix(m.cfg.Bridge)
	out := map[string][]netlink.Link{}
	for _, l := range links {
		a := l.Attrs()
		if l.Type() != "veth" {
			continue
		}
		switch {
		case strings.HasPrefix(a.Alias, prefix):
			id := strings.TrimPrefix(a.Alias, prefix)
			out[id] = append(out[id], l)
		case a.MasterIndex == m.brIdx && m.brIdx != 0:
			// On our bridge without our alias: not ours to keep.
			out[""] = append(out[""], l)
		}
	}
	return out, nil
}

package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// Setup gives sandbox id a network: a pinned netns at <NetNSDir>/<id> whose
// eth0 has an address from the subnet and a default route via the gateway,
// joined by a veth to an isolated bridge port. If id is already set up it
// returns the existing attachment (updating its internet setting); a
// half-built leftover (crash mid-Setup) is torn down and rebuilt.
func (m *Manager) Setup(ctx context.Context, id string, internet bool) (*Attachment, error) {
	if err := validateID(id); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	unlock, err := m.lock(id)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if s := m.get(id); s != nil && s.healthy {
		if err := m.setInternetLocked(id, s, internet); err != nil {
			return nil, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.attachment(id, s), nil
	}
	if err := m.teardownLocked(id); err != nil {
		return nil, fmt.Errorf("clear leftover network of sandbox %s: %w", id, err)
	}

	m.mu.Lock()
	ip, err := m.alloc.allocate(id)
	s := &sandbox{ip: ip, internet: internet}
	if err == nil {
		// Registered before any side effect so a failure can be undone by
		// teardownLocked, and so Cleanup's set resync sees it.
		m.sbx[id] = s
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := m.build(id, s); err != nil {
		if terr := m.teardownLocked(id); terr != nil {
			err = errors.Join(err, fmt.Errorf("undo: %w", terr))
		}
		return nil, fmt.Errorf("set up network of sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s.healthy = true
	return m.attachment(id, s), nil
}

func (m *Manager) build(id string, s *sandbox) error {
	hv := hostVethName(m.cfg.Bridge, id)
	// The port goes into the anti-spoof sets before the veth exists, so no
	// frame from it is ever bridged unchecked.
	ch := elemChange{portAdd: []portElem{{hv, s.ip}}}
	if s.internet {
		ch.internetAdd = []netip.Addr{s.ip}
	}
	if err := m.nftApply(ch); err != nil {
		return err
	}

	ns, nsh, err := newNetNS(m.nsPath(id), m.host)
	if err != nil {
		return err
	}
	defer ns.Close()
	defer nsh.Close()

	attrs := netlink.NewLinkAttrs()
	attrs.Name = hv
	attrs.MasterIndex = m.brIdx
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: sandboxIf, PeerNamespace: netlink.NsFd(int(ns))}
	if err := m.nl.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EXFULL) { // the bridge's ports are all taken (by links berth does not own, too)
			return errdefs.Wrap(errdefs.ErrResourceExhausted, err, "create veth %s: bridge %s has no free port (a Linux bridge takes %d): %v", hv, m.cfg.Bridge, MaxBridgePorts, err)
		}
		return fmt.Errorf("create veth %s: %w", hv, err)
	}
	// The kernel ignores IFLA_IFALIAS on create, so the ownership tag that
	// Cleanup and New rely on is set separately.
	if err := m.nl.LinkSetAlias(veth, vethAlias(m.cfg.Bridge, id)); err != nil {
		return fmt.Errorf("tag veth %s: %w", hv, err)
	}
	// Isolated before the port is up: the kernel bridge then never
	// forwards a frame between two sandbox ports (only to/from the bridge
	// itself, i.e. the gateway).
	if err := m.nl.LinkSetIsolated(veth, !weaken.Off(weaken.SandboxIsolate)); err != nil {
		return fmt.Errorf("isolate bridge port %s: %w", hv, err)
	}
	if err := m.nl.LinkSetUp(veth); err != nil {
		return fmt.Errorf("bring up %s: %w", hv, err)
	}

	// Inside the sandbox netns, through the socket created there.
	if err := nsh.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1}}); err != nil {
		return fmt.Errorf("bring up lo in sandbox: %w", err)
	}
	eth, err := nsh.LinkByName(sandboxIf)
	if err != nil {
		return fmt.Errorf("find %s in sandbox: %w", sandboxIf, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: s.ip.AsSlice(), Mask: net.CIDRMask(m.cfg.Subnet.Bits(), 32)}}
	if err := nsh.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("address %s in sandbox: %w", s.ip, err)
	}
	if err := nsh.LinkSetUp(eth); err != nil {
		return fmt.Errorf("bring up %s in sandbox: %w", sandboxIf, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: m.alloc.gateway().AsSlice()}
	if err := nsh.RouteAdd(route); err != nil {
		return fmt.Errorf("default route in sandbox: %w", err)
	}
	return nil
}

// SetInternet turns a running sandbox's internet access on or off. Turning
// it off also stops connections that are already open (the forward chain
// checks the internet set before it looks at connection state).
func (m *Manager) SetInternet(ctx context.Context, id string, on bool) error {
	if err := validateID(id); err != nil {
		return err
	}
	unlock, err := m.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	s := m.get(id)
	if s == nil || !s.healthy {
		return errdefs.NotFound("sandbox %s has no network", id)
	}
	return m.setInternetLocked(id, s, on)
}

func (m *Manager) setInternetLocked(id string, s *sandbox, on bool) error {
	m.mu.Lock()
	prev := s.internet
	s.internet = on
	m.mu.Unlock()
	if prev == on {
		return nil
	}
	ch := elemChange{}
	if on {
		ch.internetAdd = []netip.Addr{s.ip}
	} else {
		ch.internetDel = []netip.Addr{s.ip}
	}
	if err := m.nftApply(ch); err != nil {
		m.mu.Lock()
		s.internet = prev
		m.mu.Unlock()
		return fmt.Errorf("set internet of sandbox %s: %w", id, err)
	}
	return nil
}

// Teardown removes everything Setup made for id. It is idempotent: missing
// pieces are skipped, so it also clears the leftovers of a crashed Setup.
func (m *Manager) Teardown(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	unlock, err := m.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	return m.teardownLocked(id)
}

func (m *Manager) teardownLocked(id string) error {
	// Forget the sandbox first (keeping its address reserved until the
	// end), so a concurrent Cleanup resync cannot re-add its elements.
	m.mu.Lock()
	s := m.sbx[id]
	delete(m.sbx, id)
	m.mu.Unlock()

	var errs []error
	hv := hostVethName(m.cfg.Bridge, id)
	// Deleting the host end destroys the peer in the netns too.
	if l, err := m.nl.LinkByName(hv); err == nil {
		if err := m.nl.LinkDel(l); err != nil && !isLinkNotFound(err) {
			errs = append(errs, fmt.Errorf("delete veth %s: %w", hv, err))
		}
	} else if !isLinkNotFound(err) {
		errs = append(errs, fmt.Errorf("look up veth %s: %w", hv, err))
	}
	if s != nil && s.ip.IsValid() {
		ch := elemChange{internetDel: []netip.Addr{s.ip}, portDel: []portElem{{hv, s.ip}}}
		if err := m.nftApply(ch); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeNetNS(m.nsPath(id)); err != nil {
		errs = append(errs, err)
	}
	if s != nil && s.ip.IsValid() {
		m.mu.Lock()
		m.alloc.release(s.ip, id)
		m.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Cleanup removes every sandbox network not in keep: netns files, host
// veths carrying this manager's alias (or sitting on its bridge without
// one), and stray nft set elements. The daemon calls it after a restart
// with the ids it knows are alive.
func (m *Manager) Cleanup(ctx context.Context, keep map[string]bool) error {
	ids, err := m.List(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	for id := range m.sbx {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var errs []error
	seen := map[string]bool{}
	for _, id := range ids {
		if keep[id] || seen[id] {
			continue
		}
		seen[id] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.Teardown(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}

	veths, err := m.ownedVeths()
	if err != nil {
		errs = append(errs, err)
	}
	for id, links := range veths {
		if id != "" && keep[id] {
			continue
		}
		for _, l := range links {
			if err := m.nl.LinkDel(l); err != nil && !isLinkNotFound(err) {
				errs = append(errs, fmt.Errorf("delete orphan veth %s: %w", l.Attrs().Name, err))
			}
		}
	}
	if err := m.resyncSets(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// resyncSets rewrites the element sets from the manager's records in one
// transaction, dropping anything a failed Teardown may have left behind.
func (m *Manager) resyncSets() error {
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	if m.nft == nil {
		return errdefs.FailedPrecondition("network manager is closed")
	}
	o, c := m.objs, m.nft
	var inet, names, pairs []nftables.SetElement
	m.mu.Lock()
	for id, s := range m.sbx {
		if !s.ip.IsValid() {
			continue
		}
		p := portElem{hostVethName(m.cfg.Bridge, id), s.ip}
		names = append(names, nftables.SetElement{Key: ifnameKey(p.veth)})
		pairs = append(pairs, nftables.SetElement{Key: portAddrKey(p)})
		if s.internet {
			inet = append(inet, nftables.SetElement{Key: ip4(s.ip)})
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, x := range []struct {
		s *nftables.Set
		e []nftables.SetElement
	}{{o.internet, inet}, {o.ports, names}, {o.addrs, pairs}} {
		c.FlushSet(x.s)
		if len(x.e) > 0 {
			errs = append(errs, c.SetAddElements(x.s, x.e))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("queue nft resync: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("resync nft sets: %w", err)
	}
	return nil
}

package network

import (
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	blockedWait = time.Second     // a dropped SYN is retried after 1 s, so this is a clean "no"
	allowedWait = 5 * time.Second // generous: a positive must never flake on a slow machine
)

func mustSetup(t *testing.T, m *Manager, id string, internet bool) *Attachment {
	t.Helper()
	a, err := m.Setup(context.Background(), id, internet)
	if err != nil {
		t.Fatalf("Setup(%s): %v", id, err)
	}
	return a
}

func openNS(t *testing.T, path string) netns.NsHandle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

func expectBlocked(t *testing.T, what string, from *Attachment, to netip.AddrPort) {
	t.Helper()
	if err := dialFrom(from.NetNSPath, to, blockedWait); err == nil {
		t.Fatalf("%s: %s reached %s, want blocked", what, from.IP, to)
	}
}

func expectReached(t *testing.T, what string, from *Attachment, to netip.AddrPort) {
	t.Helper()
	if err := dialFrom(from.NetNSPath, to, allowedWait); err != nil {
		t.Fatalf("%s: %s could not reach %s: %v", what, from.IP, to, err)
	}
}

func (e *testEnv) reinstall(t *testing.T, h holes) {
	t.Helper()
	if err := e.m.reinstall(h); err != nil {
		t.Fatalf("reinstall %+v: %v", h, err)
	}
}

func nsHandle(t *testing.T, a *Attachment) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(openNS(t, a.NetNSPath), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// Sandbox A must not reach a TCP listener in sandbox B, neither directly on
// the shared L2 segment (port isolation) nor routed through the gateway
// (forward rule). Both are shown to be real by turning them off.
func TestSandboxesCannotReachEachOther(t *testing.T) {
	e := newTestEnv(t)
	// Internet on for both: even then, no sandbox-to-sandbox path.
	a := mustSetup(t, e.m, "a", true)
	b := mustSetup(t, e.m, "b", true)
	target := listen(t, openNS(t, b.NetNSPath), netip.AddrPortFrom(b.IP, 0))

	expectBlocked(t, "direct L2", a, target)

	// Routed: force traffic between A and B through the gateway, both
	// ways (B's answer would otherwise go straight over L2 and be stopped
	// by port isolation), and ignore ICMP redirects that would send it
	// back onto the direct path.
	routeVia := func(from, to *Attachment) *netlink.Route {
		h := nsHandle(t, from)
		eth, err := h.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		r := &netlink.Route{LinkIndex: eth.Attrs().Index, Dst: &net.IPNet{IP: to.IP.AsSlice(), Mask: net.CIDRMask(32, 32)}, Gw: from.Gateway.AsSlice()}
		if err := h.RouteAdd(r); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"all", "eth0"} {
			writeSysctlIn(t, from, "/proc/sys/net/ipv4/conf/"+k+"/accept_redirects", "0")
		}
		return r
	}
	routeVia(a, b)
	routeVia(b, a)
	expectBlocked(t, "routed via gateway", a, target)

	// Negative control 1: without the forward rules, the routed path
	// works, so the probe above can see a hole. (The subnet is also in
	// the "never" set, so that rule is lifted too.)
	e.reinstall(t, holes{forwardBr: true, never: true})
	expectReached(t, "routed, forward rules off", a, target)
	e.reinstall(t, holes{})
	expectBlocked(t, "routed, rules back", a, target)

	// Back to on-link routes, then prove port isolation on its own: with
	// the forward rules off (they also see bridged frames when
	// br_netfilter is loaded), isolation alone still blocks A -> B...
	for _, x := range [][2]*Attachment{{a, b}, {b, a}} {
		h := nsHandle(t, x[0])
		if err := h.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: x[1].IP.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			t.Fatal(err)
		}
	}
	e.reinstall(t, holes{forwardBr: true, never: true})
	forgetNeighbours(t, a, b)
	expectBlocked(t, "direct, forward rules off, isolation on", a, target)

	// ...and negative control 2: with isolation off too, A reaches B.
	for _, v := range []string{a.HostVeth, b.HostVeth} {
		l, err := netlink.LinkByName(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetIsolated(l, false); err != nil {
			t.Fatal(err)
		}
	}
	forgetNeighbours(t, a, b)
	expectReached(t, "direct, isolation and forward rules off", a, target)
}

// forgetNeighbours drops failed ARP entries left by a blocked attempt, which
// would otherwise fail the next attempt at once with EHOSTUNREACH.
func forgetNeighbours(t *testing.T, a, b *Attachment) {
	t.Helper()
	for _, x := range [][2]*Attachment{{a, b}, {b, a}} {
		h := nsHandle(t, x[0])
		eth, err := h.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		_ = h.NeighDel(&netlink.Neigh{LinkIndex: eth.Attrs().Index, IP: x[1].IP.AsSlice()})
	}
}

// A sandbox must not reach host services: not on the gateway address and
// not on another address of the host.
func TestSandboxCannotReachHost(t *testing.T) {
	e := newTestEnv(t)
	a := mustSetup(t, e.m, "a", true)

	// Another host address, on a veth the test owns (the kernel here may
	// lack the dummy driver).
	other := netip.MustParsePrefix("198.51.100.7/24")
	newSideNS(t, other, netip.MustParsePrefix("198.51.100.8/24"))

	onGW := listen(t, netns.None(), netip.AddrPortFrom(a.Gateway, 0))
	onOther := listen(t, netns.None(), netip.AddrPortFrom(other.Addr(), 0))
	onOtherGW := listen(t, netns.None(), netip.AddrPortFrom(a.Gateway, 0))

	expectBlocked(t, "host service on gateway", a, onGW)
	expectBlocked(t, "host service on other host address", a, onOther)

	// Negative control: without the input rules both connect.
	e.reinstall(t, holes{input: true})
	expectReached(t, "gateway, input rules off", a, onGW)
	expectReached(t, "other host address, input rules off", a, onOther)

	// HostTCPPorts opens exactly the listed port on the gateway.
	e.m.cfg.HostTCPPorts = []uint16{onGW.Port()}
	e.reinstall(t, holes{})
	expectReached(t, "allowed host port", a, onGW)
	expectBlocked(t, "other port on gateway", a, onOtherGW)
	expectBlocked(t, "allowed port number on another host address", a, netip.AddrPortFrom(other.Addr(), onGW.Port()))
}

func writeSysctlIn(t *testing.T, a *Attachment, path, val string) {
	t.Helper()
	if err := inNSPath(a.NetNSPath, func() error { return os.WriteFile(path, []byte(val), 0) }); err != nil {
		t.Fatalf("write %s in %s: %v", path, a.NetNSPath, err)
	}
}

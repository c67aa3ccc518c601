package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// New turns on IPv4 forwarding; put the host back as we found it.
	old, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	code := m.Run()
	if len(old) > 0 && os.Geteuid() == 0 {
		_ = os.WriteFile("/proc/sys/net/ipv4/ip_forward", old, 0)
	}
	os.Exit(code)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, netlink, nftables)")
	}
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// testEnv is one Manager on its own bridge, subnet, table and netns dir, so
// it cannot clash with a running berth or with another test.
type testEnv struct {
	cfg Config
	m   *Manager
	dir string
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	requireRoot(t)
	var b [1]byte
	_, _ = rand.Read(b[:])
	dir, err := os.MkdirTemp("/run", "berth-nettest-")
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{dir: dir, cfg: Config{
		Bridge:   "bt" + randHex(8),
		Subnet:   netip.MustParsePrefix(fmt.Sprintf("10.231.%d.0/24", b[0])),
		NetNSDir: filepath.Join(dir, "netns"),
		Table:    "berthtest_" + randHex(8),
	}}
	t.Cleanup(func() { e.destroy(t) })
	e.m = e.newManager(t)
	return e
}

func (e *testEnv) newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// destroy removes everything the env made, even after a failed test.
func (e *testEnv) destroy(t *testing.T) {
	ctx := context.Background()
	if e.m != nil {
		_ = e.m.Close()
	}
	if m, err := New(ctx, e.cfg); err == nil {
		if err := m.Cleanup(ctx, nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		_ = m.Close()
	}
	if l, err := netlink.LinkByName(e.cfg.Bridge); err == nil {
		_ = netlink.LinkDel(l)
	}
	if c, err := nftables.New(); err == nil {
		c.DelTable(&nftables.Table{Name: e.cfg.Table, Family: nftables.TableFamilyINet})
		_ = c.Flush()
		c.DelTable(&nftables.Table{Name: e.cfg.Table, Family: nftables.TableFamilyBridge})
		_ = c.Flush()
	}
	_ = unix.Unmount(e.cfg.NetNSDir, unix.MNT_DETACH)
	if err := os.RemoveAll(e.dir); err != nil {
		t.Errorf("remove %s: %v", e.dir, err)
	}
}

// inNS runs fn on a locked OS thread inside ns.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, err) // thread stays locked and is discarded
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func inNSPath(path string, fn func() error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	return inNS(ns, fn)
}

// dialFrom tries a TCP connection from inside the netns at path.
func dialFrom(path string, addr netip.AddrPort, timeout time.Duration) error {
	return inNSPath(path, func() error {
		c, err := net.DialTimeout("tcp4", addr.String(), timeout)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// listen starts a TCP listener inside ns (or in the host netns when ns is
// not open) that accepts and closes connections until the test ends.
func listen(t *testing.T, ns netns.NsHandle, addr netip.AddrPort) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	do := func() error {
		var err error
		ln, err = net.Listen("tcp4", addr.String())
		return err
	}
	var err error
	if ns.IsOpen() {
		err = inNS(ns, do)
	} else {
		err = do()
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// sideNS is a throwaway netns (held by fd only, nothing to unmount) joined
// to the host by a veth: a fake internet host or a private-range service.
type sideNS struct {
	ns       netns.NsHandle
	hostVeth string
}

func newSideNS(t *testing.T, hostAddr, nsAddr netip.Prefix) *sideNS {
	t.Helper()
	s := &sideNS{hostVeth: "bs" + randHex(10)}
	err := func() error {
		ch := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := netns.Get()
			if err != nil {
				ch <- err
				return
			}
			defer orig.Close()
			s.ns, err = netns.New()
			if err != nil {
				ch <- err
				return
			}
			if err := netns.Set(orig); err != nil {
				ch <- err
				return
			}
			runtime.UnlockOSThread()
			ch <- nil
		}()
		return <-ch
	}()
	if err != nil {
		t.Fatalf("side netns: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(s.hostVeth); err == nil {
			_ = netlink.LinkDel(l)
		}
		s.ns.Close()
	})
	la := netlink.NewLinkAttrs()
	la.Name = s.hostVeth
	v := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(s.ns))}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatalf("side veth: %v", err)
	}
	mustAddrUp(t, &netlink.Handle{}, v, hostAddr)
	h, err := netlink.NewHandleAt(s.ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	peer, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	mustAddrUp(t, h, peer, nsAddr)
	if err := h.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAddrUp(t *testing.T, h *netlink.Handle, l netlink.Link, p netip.Prefix) {
	t.Helper()
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("addr %s: %v", p, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatalf("up: %v", err)
	}
}

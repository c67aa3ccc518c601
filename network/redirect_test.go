package network

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// TestRedirectToProxy: with ProxyPort and DNSPort set, every TCP
// connection a sandbox opens, to any address, lands on the gateway's proxy
// port, and DNS to any server lands on the resolver port; without them
// (negative control) the same connection is refused.
func TestRedirectToProxy(t *testing.T) {
	requireRoot(t)
	e := newTestEnv(t)
	ctx := context.Background()
	att, err := e.m.Setup(ctx, "plain", false)
	if err != nil {
		t.Fatal(err)
	}
	far := netip.MustParseAddrPort("203.0.113.77:80")
	if err := dialFrom(att.NetNSPath, far, time.Second); err == nil {
		t.Fatal("without a proxy port the connection got somewhere")
	}
	if err := e.m.Teardown(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	e.m.Close()

	gw := Gateway(e.cfg.Subnet)
	ln := listen(t, netns.None(), netip.AddrPortFrom(gw, 0))
	pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(gw, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	e.cfg.ProxyPort = ln.Port()
	e.cfg.DNSPort = uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	e.m = e.newManager(t)
	att, err = e.m.Setup(ctx, "proxied", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"203.0.113.77:80", "198.51.100.1:443", "10.1.2.3:5432", gw.String() + ":22"} {
		if err := dialFrom(att.NetNSPath, netip.MustParseAddrPort(to), 2*time.Second); err != nil {
			t.Errorf("TCP to %s did not reach the proxy: %v", to, err)
		}
	}
	if err := inNSPath(att.NetNSPath, func() error {
		c, err := net.Dial("udp4", "198.51.100.53:53")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("q"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 16)
	if n, from, err := pc.ReadFrom(buf); err != nil || string(buf[:n]) != "q" || from.(*net.UDPAddr).IP.String() != att.IP.String() {
		t.Fatalf("DNS to another server did not reach the resolver: %v %v", from, err)
	}
}

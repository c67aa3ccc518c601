package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/berth-sh/berth/api"
)

// fakeNet is an in-process "internet" on loopback: a TLS and a plain HTTP
// server that echo what they received, a DNS server, and a Manager whose
// proxy is fed connections with a chosen original destination.
type fakeNet struct {
	m           *Manager
	sb          *sandbox
	upRoots     *x509.CertPool
	tlsAddr     netip.AddrPort
	httpAddr    netip.AddrPort
	proxy       string
	dst         atomic.Value // netip.AddrPort the next proxied connection was "headed for"
	secretReads atomic.Int64
}

func echo(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "server=%s host=%s auth=%s", name, r.Host, r.Header.Get("Authorization"))
	})
}

func listen(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func newFakeNet(t testing.TB, p api.NetworkPolicy) *fakeNet {
	f := &fakeNet{}
	upCA, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f.upRoots = x509.NewCertPool()
	f.upRoots.AddCert(upCA.cert)
	tlsLn := listen(t)
	srv := &http.Server{Handler: echo("api"), TLSConfig: &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return upCA.Leaf(h.ServerName)
	}}}
	go srv.ServeTLS(tlsLn, "", "")
	httpLn := listen(t)
	go http.Serve(httpLn, echo("plain"))
	t.Cleanup(func() { srv.Close() })
	f.tlsAddr = netip.MustParseAddrPort(tlsLn.Addr().String())
	f.httpAddr = netip.MustParseAddrPort(httpLn.Addr().String())

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		ip := map[string]string{"api.internal.test.": "127.0.0.1", "other.test.": "127.0.0.1", "rebind.test.": "10.1.2.3"}[q.Question[0].Name]
		if ip == "" {
			r.Rcode = dns.RcodeNameError
		} else if q.Question[0].Qtype == dns.TypeA {
			r.Answer = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(ip)})
		}
		w.WriteMsg(r)
	})}
	go ds.ActivateAndServe()
	t.Cleanup(func() { ds.Shutdown() })

	f.m, err = New(Config{
		Subnet: netip.MustParsePrefix("10.88.0.0/16"), Upstream: pc.LocalAddr().String(), CADir: t.TempDir(), UpstreamRoots: f.upRoots,
		Secret: func(_ context.Context, name string) (string, bool, error) {
			f.secretReads.Add(1)
			return map[string]string{"gh": "s3cr3t"}[name], name == "gh", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.m.bl.loopbackOK = true
	f.m.bl.hostAddrsFn = func() []netip.Prefix { return nil }
	f.m.testPorts = func(port uint16) string {
		switch port {
		case f.tlsAddr.Port():
			return api.EgressTLS
		case f.httpAddr.Port():
			return api.EgressHTTP
		}
		return api.EgressTCP
	}
	if err := f.m.Attach("sb", netip.MustParseAddr("10.88.0.2"), p); err != nil {
		t.Fatal(err)
	}
	f.sb = f.m.bySource(netip.MustParseAddr("10.88.0.2"))
	f.dst.Store(f.tlsAddr)
	pln := listen(t)
	f.proxy = pln.Addr().String()
	go func() {
		for {
			c, err := pln.Accept()
			if err != nil {
				return
			}
			go f.m.handle(c, f.sb, f.dst.Load().(netip.AddrPort))
		}
	}()
	return f
}

// get makes one HTTPS request through the proxy with the given SNI, Host
// and trusted roots, on a new connection.
func (f *fakeNet) get(sni, host string, roots *x509.CertPool) (string, error) {
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return net.Dial("tcp", f.proxy) },
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: sni},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+sni+"/", nil)
	req.Host = host
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return fmt.Sprintf("%d %s", res.StatusCode, b), nil
}

func (f *fakeNet) caPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(f.m.CACertPEM())
	return p
}

func lastEvent(t *testing.T, m *Manager) api.EgressEvent {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		evs := m.Log("sb", 0)
		if len(evs) > 0 && (evs[len(evs)-1].BytesIn > 0 || !evs[len(evs)-1].Allowed) || time.Now().After(deadline) {
			if len(evs) == 0 {
				t.Fatal("empty audit log")
			}
			return evs[len(evs)-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTunnelBySNI(t *testing.T) {
	f := newFakeNet(t, api.NetworkPolicy{Allow: []string{"api.internal.test"}})
	out, err := f.get("api.internal.test", "api.internal.test", f.upRoots)
	if err != nil || !strings.HasPrefix(out, "200 server=api") {
		t.Fatalf("allowed host: %q %v", out, err)
	}
	if ev := lastEvent(t, f.m); !ev.Allowed || ev.Kind != api.EgressTLS || ev.Host != "api.internal.test" || ev.BytesIn == 0 || ev.Injected {
		t.Fatalf("audit: %+v", ev)
	}
	if out, err := f.get("other.test", "other.test", f.upRoots); err == nil {
		t.Fatalf("denied host answered: %q", out)
	}
	if ev := lastEvent(t, f.m); ev.Allowed || ev.Host != "other.test" || ev.Rule != "default" {
		t.Fatalf("audit: %+v", ev)
	}
	// A name whose only address is private is refused (rebinding).
	f.m.SetPolicy("sb", api.NetworkPolicy{Allow: []string{"rebind.test"}})
	if out, err := f.get("rebind.test", "rebind.test", f.upRoots); err == nil {
		t.Fatalf("rebind.test answered: %q", out)
	}
	if ev := lastEvent(t, f.m); ev.Allowed || !strings.Contains(ev.Rule, "blocked") {
		t.Fatalf("audit: %+v", ev)
	}
}

func TestInterceptInjects(t *testing.T) {
	f := newFakeNet(t, api.NetworkPolicy{Allow: []string{"api.internal.test"}, Inject: []api.InjectRule{
		{Host: "api.internal.test", SetHeaders: map[string]string{"Authorization": "Bearer ${secret:gh}"}}}})
	if _, err := f.get("api.internal.test", "api.internal.test", f.upRoots); err == nil {
		t.Fatal("intercepted connection verified against the upstream roots: not intercepted")
	}
	out, err := f.get("api.internal.test", "api.internal.test", f.caPool())
	if err != nil || out != "200 server=api host=api.internal.test auth=Bearer s3cr3t" {
		t.Fatalf("intercepted: %q %v", out, err)
	}
	if ev := lastEvent(t, f.m); !ev.Allowed || ev.Kind != api.EgressHTTPS || !ev.Injected {
		t.Fatalf("audit: %+v", ev)
	}
	perRequest := false
	for _, e := range f.m.Log("sb", 0) {
		if e.Method == "GET" && e.Path == "/" && e.Status == 200 && e.Injected && e.BytesIn > 0 {
			perRequest = true
		}
	}
	if !perRequest {
		t.Fatalf("no per-request audit event: %+v", f.m.Log("sb", 0))
	}
	// Host must match SNI.
	out, err = f.get("api.internal.test", "other.test", f.caPool())
	if err != nil || !strings.HasPrefix(out, "421 ") {
		t.Fatalf("mismatched Host: %q %v", out, err)
	}
	// The upstream's certificate is verified: without its root, 502.
	f.m.cfg.UpstreamRoots = x509.NewCertPool()
	out, err = f.get("api.internal.test", "api.internal.test", f.caPool())
	if err != nil || !strings.HasPrefix(out, "502 ") || strings.Contains(out, "s3cr3t") {
		t.Fatalf("unverified upstream: %q %v", out, err)
	}
}

func TestHTTPByHostAndPolicyChange(t *testing.T) {
	f := newFakeNet(t, api.NetworkPolicy{Allow: []string{"api.internal.test", "other.test"}})
	f.dst.Store(f.httpAddr)
	c, err := net.Dial("tcp", f.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	roundTrip := func(host string) (string, error) {
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return "", err
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return string(b), nil
	}
	if out, err := roundTrip("other.test"); err != nil || !strings.HasPrefix(out, "server=plain host=other.test") {
		t.Fatalf("%q %v", out, err)
	}
	// POST bodies (fixed and chunked) stream through.
	fmt.Fprintf(c, "POST /p HTTP/1.1\r\nHost: other.test\r\nContent-Length: 5\r\n\r\nhello")
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("POST: %v %v", res, err)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	// Dropping api.internal.test keeps the open other.test connection.
	f.m.SetPolicy("sb", api.NetworkPolicy{Allow: []string{"other.test"}})
	if out, err := roundTrip("other.test"); err != nil || !strings.HasPrefix(out, "server=plain") {
		t.Fatalf("still-allowed connection dropped: %q %v", out, err)
	}
	// Dropping other.test closes it.
	f.m.SetPolicy("sb", api.NetworkPolicy{})
	if out, err := roundTrip("other.test"); err == nil {
		t.Fatalf("connection survived a policy that denies it: %q", out)
	}
	// A later request for another host on a kept-alive connection ends it.
	c3, err := net.Dial("tcp", f.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	f.m.SetPolicy("sb", api.NetworkPolicy{Allow: []string{"api.internal.test", "other.test"}})
	br3 := bufio.NewReader(c3)
	fmt.Fprintf(c3, "GET / HTTP/1.1\r\nHost: api.internal.test\r\n\r\n")
	if res, err := http.ReadResponse(br3, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("first request: %v %v", res, err)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	fmt.Fprintf(c3, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	if res, err := http.ReadResponse(br3, nil); err == nil {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("request for another host on the same connection answered: %s", b)
	}
	waitEvent(t, f.m, func(e api.EgressEvent) bool { return e.Rule == "host-changed" && e.Host == "evil.test" })
	f.m.SetPolicy("sb", api.NetworkPolicy{})
	c2, _ := net.Dial("tcp", f.proxy)
	defer c2.Close()
	fmt.Fprintf(c2, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("denied HTTP: %v %v", res, err)
	}
}

func TestDNSAnswers(t *testing.T) {
	f := newFakeNet(t, api.NetworkPolicy{Allow: []string{"api.internal.test", "rebind.test"}})
	// The resolver knows sandboxes by source address; this one is on loopback.
	if err := f.m.Attach("sb", netip.MustParseAddr("127.0.0.1"), api.NetworkPolicy{Allow: []string{"api.internal.test", "rebind.test"}}); err != nil {
		t.Fatal(err)
	}
	closeDNS, addr, err := f.m.serveDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeDNS()
	ask := func(name string, qt uint16) *dns.Msg {
		q := new(dns.Msg)
		q.SetQuestion(name, qt)
		r, err := dns.Exchange(q, addr)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	r := ask("api.internal.test.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "127.0.0.1" {
		t.Fatalf("allowed name: %v", r)
	}
	if !f.m.bySource(netip.MustParseAddr("127.0.0.1")).pinned("api.internal.test", netip.MustParseAddr("127.0.0.1")) {
		t.Fatal("answer not pinned")
	}
	if r := ask("other.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("denied name: %v", r)
	}
	if r := ask("rebind.test.", dns.TypeA); len(r.Answer) != 0 {
		t.Fatalf("private answer handed out: %v", r)
	}
	if r := ask("api.internal.test.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("AAAA: %v", r)
	}
	evs := f.m.Log("sb", 0)
	var denied, allowed int
	for _, e := range evs {
		if e.Kind == api.EgressDNS {
			if e.Allowed {
				allowed++
			} else {
				denied++
			}
		}
	}
	if denied != 2 || allowed < 2 { // other.test by policy, rebind.test by the blocklist
		t.Fatalf("dns audit: %+v", evs)
	}
}

func TestConnectionCap(t *testing.T) {
	f := newFakeNet(t, api.NetworkPolicy{Allow: []string{"api.internal.test"}})
	f.m.cfg.MaxConns = 2
	f.dst.Store(f.httpAddr)
	var open []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", f.proxy)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}
	// The two held connections sit in the head read; wait until both count.
	for i := 0; i < 100 && f.sb.active.Load() < 2; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	// Over the cap: reset (so fast that the dial itself may see it).
	if out, err := roundTripOnce(f.proxy, "api.internal.test"); err == nil {
		t.Fatalf("a connection over the cap was served: %q", out)
	}
	if ev := lastEvent(t, f.m); ev.Rule != "limit" {
		t.Fatalf("audit: %+v", ev)
	}
	// Below the cap again, connections are served.
	open[0].Close()
	for i := 0; i < 100 && f.sb.active.Load() >= 2; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := roundTripOnce(f.proxy, "api.internal.test"); err != nil {
		t.Fatalf("after the cap freed up: %v", err)
	}
}

func roundTripOnce(proxy, host string) (string, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return "", err
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(res.Body)
	return string(b), nil
}

// TestTCPByResolvedName: a host rule with a port admits other TCP to the
// addresses berth's resolver gave the sandbox for that name, and only
// those; a denied name is denied on any port.
func TestTCPByResolvedName(t *testing.T) {
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	echo := netip.MustParseAddrPort(ln.Addr().String())
	f := newFakeNet(t, api.NetworkPolicy{Allow: []string{fmt.Sprintf("db.test:%d", echo.Port())}})
	f.dst.Store(echo)
	ping := func() bool {
		c, err := net.Dial("tcp", f.proxy)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return false
		}
		b := make([]byte, 4)
		_, err = io.ReadFull(c, b)
		return err == nil && string(b) == "ping"
	}
	if ping() {
		t.Fatal("address never resolved for db.test was admitted")
	}
	f.sb.pin("db.test", []netip.Addr{echo.Addr()}, time.Minute)
	if !ping() {
		t.Fatal("address resolved for db.test refused")
	}
	waitEvent(t, f.m, func(e api.EgressEvent) bool {
		return e.Allowed && e.Host == "db.test" && e.Kind == api.EgressTCP && e.BytesIn == 4
	})
	f.m.SetPolicy("sb", api.NetworkPolicy{Internet: true, Deny: []string{"db.test"}})
	if ping() {
		t.Fatal("denied name reached on another port")
	}
	f.m.SetPolicy("sb", api.NetworkPolicy{Internet: true})
	if !ping() {
		t.Fatal("internet on, nothing denied, refused")
	}
}

// waitEvent waits until the audit log holds an event matching ok.
func waitEvent(t *testing.T, m *Manager, ok func(api.EgressEvent) bool) {
	t.Helper()
	for i := 0; i < 200; i++ {
		for _, e := range m.Log("sb", 0) {
			if ok(e) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no such audit event in %+v", m.Log("sb", 0))
}

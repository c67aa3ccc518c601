package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/berth-sh/berth/api"
)

// maxAnswerTTL caps what sandboxes cache, so a policy change or a changed
// upstream answer is seen soon.
const maxAnswerTTL = 60

// serveDNS starts the resolver on addr (UDP, and TCP on the same port)
// and returns the UDP address it listens on.
func (m *Manager) serveDNS(addr string) (func() error, string, error) {
	h := dns.HandlerFunc(m.answer)
	var pc net.PacketConn
	var ln net.Listener
	var err error
	// With port 0 (tests) the TCP twin of a free UDP port may be taken:
	// try a few.
	for try := 0; ; try++ {
		pc, err = net.ListenPacket("udp", addr)
		if err != nil {
			return nil, "", fmt.Errorf("egress resolver listen udp %s (berth serve --egress-dns-port): %w", addr, err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if _, port, _ := net.SplitHostPort(addr); port != "0" || try == 10 {
			return nil, "", fmt.Errorf("egress resolver listen tcp %s: %w", addr, err)
		}
	}
	addr = pc.LocalAddr().String()
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second}
	go func() { _ = udp.ActivateAndServe() }()
	go func() { _ = tcp.ActivateAndServe() }()
	return func() error { return errors.Join(udp.Shutdown(), tcp.Shutdown()) }, addr, nil
}

// answer resolves one query from a sandbox: names the policy denies get
// NXDOMAIN without leaving the host (no DNS exfiltration through them);
// A answers drop blocked addresses (DNS rebinding) and are pinned for the
// proxy; AAAA is empty (sandboxes have no IPv6).
func (m *Manager) answer(w dns.ResponseWriter, q *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(q)
	resp.RecursionAvailable = true
	defer func() { _ = w.WriteMsg(resp) }()
	src, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	sb := m.bySource(src.Addr())
	if sb == nil {
		resp.Rcode = dns.RcodeRefused
		return
	}
	if len(q.Question) != 1 || q.Opcode != dns.OpcodeQuery {
		resp.Rcode = dns.RcodeFormatError
		return
	}
	qn := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qn.Name, "."))
	ev := api.EgressEvent{Kind: api.EgressDNS, Host: name, Port: 53}
	dec := m.decide(sb.policy(), name, netip.Addr{}, 0)
	if NormalizeHost(name) == "" {
		dec = Decision{false, "malformed"}
	}
	ev.Allowed, ev.Rule = dec.Allowed, dec.Rule
	if !dec.Allowed {
		resp.Rcode = dns.RcodeNameError
		m.record(sb.name, ev)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch qn.Qtype {
	case dns.TypeA:
		addrs, ttl, err := m.lookupA(ctx, name)
		if err != nil {
			resp.Rcode = dns.RcodeServerFailure
			var nx errNXDomain
			var bl errBlocked
			switch {
			case errors.As(err, &nx):
				resp.Rcode = dns.RcodeNameError
			case errors.As(err, &bl):
				// Rebinding to a forbidden address: the name does not
				// exist as far as the sandbox is concerned.
				resp.Rcode = dns.RcodeNameError
				ev.Allowed, ev.Rule = false, bl.why
			}
			ev.Reason = err.Error()
			break
		}
		sb.pin(name, addrs, ttl)
		t := uint32(min(ttl/time.Second, maxAnswerTTL))
		var ips []string
		for _, a := range addrs {
			resp.Answer = append(resp.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: qn.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: t},
				A:   a.AsSlice(),
			})
			ips = append(ips, a.String())
		}
		ev.IP = strings.Join(ips, ",")
	case dns.TypeAAAA:
		// No IPv6 inside sandboxes: an empty answer makes clients use A.
	default:
		up, err := m.exchange(ctx, q)
		if err != nil {
			resp.Rcode = dns.RcodeServerFailure
			ev.Reason = err.Error()
			break
		}
		resp.Rcode = up.Rcode
		for _, rr := range up.Answer {
			switch rr.(type) {
			case *dns.A, *dns.AAAA: // addresses only through the A path
			default:
				resp.Answer = append(resp.Answer, rr)
			}
		}
	}
	m.record(sb.name, ev)
}

type errBlocked struct{ name, why string }

func (e errBlocked) Error() string {
	return e.name + " resolves only to blocked addresses (" + e.why + ")"
}

type errNXDomain struct{ name string }

func (e errNXDomain) Error() string { return "no such host " + e.name }

// exchange sends q upstream over UDP, retrying over TCP when truncated.
func (m *Manager) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if m.cfg.Upstream == "" {
		return nil, errors.New("no upstream DNS server configured")
	}
	c := &dns.Client{Timeout: 4 * time.Second}
	r, _, err := c.ExchangeContext(ctx, q, m.cfg.Upstream)
	if err == nil && r.Truncated {
		c.Net = "tcp"
		r, _, err = c.ExchangeContext(ctx, q, m.cfg.Upstream)
	}
	if err != nil {
		return nil, fmt.Errorf("upstream DNS: %w", err)
	}
	return r, nil
}

// lookupA resolves name's IPv4 addresses upstream and drops the blocked
// ones. ttl is the smallest TTL of the answers.
func (m *Manager) lookupA(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.RecursionDesired = true
	r, err := m.exchange(ctx, q)
	if err != nil {
		return nil, 0, err
	}
	if r.Rcode == dns.RcodeNameError {
		return nil, 0, errNXDomain{name}
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, 0, fmt.Errorf("upstream DNS: %s", dns.RcodeToString[r.Rcode])
	}
	var out []netip.Addr
	ttl := uint32(maxAnswerTTL)
	blocked := ""
	for _, rr := range r.Answer {
		a, ok := rr.(*dns.A)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.A.To4())
		if !ok {
			continue
		}
		if why := m.bl.Blocked(ip); why != "" {
			blocked = why
			continue
		}
		out = append(out, ip)
		ttl = min(ttl, a.Hdr.Ttl)
	}
	if len(out) == 0 && blocked != "" {
		return nil, 0, errBlocked{name, blocked}
	}
	return out, time.Duration(ttl) * time.Second, nil
}

package egress

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/weaken"
)

// alwaysBlocked can never be opened: loopback, "this network",
// link-local (cloud metadata 169.254.169.254, fe80::/10), multicast,
// reserved and broadcast, and IPv6 forms that embed an IPv4 address
// (NAT64, 6to4, IPv4-compatible) since their target cannot be checked.
var alwaysBlocked = prefixes(
	"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "192.0.0.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"::/96", "::1/128", "fe80::/10", "fec0::/10", "ff00::/8", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "100::/64",
)

// privateRanges are blocked unless the operator opens part of them:
// RFC 1918, CGNAT (100.64.0.0/10), benchmarking and unique-local.
var privateRanges = prefixes(
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "198.18.0.0/15", "fc00::/7",
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// Blocklist decides which destination addresses are out of bounds for
// every sandbox, whatever its policy.
type Blocklist struct {
	// Subnet is the sandbox subnet (other sandboxes, the gateway).
	Subnet netip.Prefix
	// Open are operator-opened parts of the private ranges.
	Open []netip.Prefix

	mu        sync.Mutex
	hostAt    time.Time
	hostAddrs []netip.Prefix // the host's addresses and connected networks
	// hostAddrsFn lists them; tests replace it.
	hostAddrsFn func() []netip.Prefix
	// loopbackOK lets in-process tests and benchmarks use 127.0.0.1 as
	// "the internet". Nothing outside this package can set it.
	loopbackOK bool
}

// NewBlocklist validates open: each must lie inside a private range.
func NewBlocklist(subnet netip.Prefix, open []netip.Prefix) (*Blocklist, error) {
	for _, o := range open {
		inside := false
		for _, p := range privateRanges {
			if p.Bits() <= o.Bits() && p.Contains(o.Addr()) {
				inside = true
			}
		}
		if !inside {
			return nil, errdefs.InvalidArgument("egress: %s is not inside a private range (%v); only private ranges can be opened", o, privateRanges)
		}
		if o.Overlaps(subnet) {
			return nil, errdefs.InvalidArgument("egress: %s overlaps the sandbox subnet %s", o, subnet)
		}
	}
	return &Blocklist{Subnet: subnet, Open: open, hostAddrsFn: interfacePrefixes}, nil
}

// interfacePrefixes lists every address of this netns's interfaces, and
// the networks they are on (the host's LAN neighbours).
func interfacePrefixes() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		bits, _ := n.Mask.Size()
		if ip.Is4() && bits > 32 {
			bits -= 96
		}
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		if p := netip.PrefixFrom(ip, bits).Masked(); bits > 0 {
			out = append(out, p)
		}
	}
	return out
}

func (b *Blocklist) host() []netip.Prefix {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.hostAt) > 2*time.Second {
		b.hostAddrs, b.hostAt = b.hostAddrsFn(), time.Now()
	}
	return b.hostAddrs
}

// Blocked reports whether ip may never be reached, and why ("" if not).
func (b *Blocklist) Blocked(ip netip.Addr) string {
	if weaken.Off(weaken.EgressBlocklist) {
		return ""
	}
	if !ip.IsValid() {
		return "invalid address"
	}
	ip = ip.Unmap() // ::ffff:10.0.0.1 is 10.0.0.1
	if b.loopbackOK && ip.IsLoopback() {
		return ""
	}
	for _, p := range alwaysBlocked {
		if p.Contains(ip) {
			return "blocked:" + p.String()
		}
	}
	if b.Subnet.Contains(ip) {
		return "blocked:sandbox-subnet"
	}
	for _, p := range b.host() {
		if p.Contains(ip) {
			return fmt.Sprintf("blocked:host(%s)", p)
		}
	}
	for _, p := range privateRanges {
		if p.Contains(ip) {
			for _, o := range b.Open {
				if o.Contains(ip) {
					return ""
				}
			}
			return "blocked:" + p.String()
		}
	}
	return ""
}

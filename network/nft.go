package network

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Set and chain names inside Config.Table. Tests and operators read them
// with `nft list table inet <table>` / `nft list table bridge <table>`.
const (
	setNever     = "never"     // inet: destinations no sandbox may reach, ever
	setInternet  = "internet"  // inet: sandbox addresses allowed to the internet
	setPorts     = "ports"     // bridge: host veths of this manager
	setPortAddrs = "portaddrs" // bridge: host veth . the one source address it may use
)

// neverRanges are destinations that stay unreachable even with internet on:
// RFC 1918 private space (other tenants, the host's LAN), CGNAT, link-local
// (cloud metadata at 169.254.169.254), loopback, "this network", multicast
// and reserved. The sandbox subnet and the host's directly connected
// networks are added when the table is built.
var neverRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// holes switches single protections off. Only tests set it, to prove each
// probe catches the hole the protection closes (negative controls).
type holes struct {
	input     bool // no input-hook rules
	forwardBr bool // no bridge-to-bridge forward drop
	never     bool // no "never" destination drop
	antiSpoof bool // no bridge-family anti-spoof chain
	inbound   bool // no drop of new connections into sandboxes
}

// portElem is one sandbox's entry in the bridge-family sets.
type portElem struct {
	veth string
	ip   netip.Addr
}

func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func ip4(a netip.Addr) []byte { b := a.As4(); return b[:] }

func portAddrKey(e portElem) []byte { return append(ifnameKey(e.veth), ip4(e.ip)...) }

type nftObjects struct {
	inet, br                      *nftables.Table
	never, internet, ports, addrs *nftables.Set
}

func newNFTObjects(table string) *nftObjects {
	// Declared byte orders only steer how `nft list` prints elements (the
	// kernel compares raw bytes): addresses are big-endian, and nft reads a
	// lone ifname key as a host-order string.
	be := binaryutil.BigEndian
	inet := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	br := &nftables.Table{Name: table, Family: nftables.TableFamilyBridge}
	return &nftObjects{
		inet:     inet,
		br:       br,
		never:    &nftables.Set{Table: inet, Name: setNever, KeyType: nftables.TypeIPAddr, Interval: true, Constant: true, KeyByteOrder: be},
		internet: &nftables.Set{Table: inet, Name: setInternet, KeyType: nftables.TypeIPAddr, KeyByteOrder: be},
		ports:    &nftables.Set{Table: br, Name: setPorts, KeyType: nftables.TypeIFName, KeyByteOrder: binaryutil.NativeEndian},
		addrs: &nftables.Set{Table: br, Name: setPortAddrs, Concatenation: true, KeyByteOrder: be,
			KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)},
	}
}

// neverElements turns neverRanges plus extra prefixes into interval-set
// elements: a start key per merged range and an interval-end key one past
// its last address (omitted when the range runs to 255.255.255.255).
func neverElements(extra ...netip.Prefix) []nftables.SetElement {
	type rng struct{ lo, hi uint64 } // hi exclusive
	var rs []rng
	for _, p := range append(append([]netip.Prefix{}, neverRanges...), extra...) {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		b := p.Addr().As4()
		lo := uint64(binary.BigEndian.Uint32(b[:]))
		rs = append(rs, rng{lo, lo + 1<<(32-p.Bits())})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	var merged []rng
	for _, r := range rs {
		if n := len(merged); n > 0 && r.lo <= merged[n-1].hi {
			if r.hi > merged[n-1].hi {
				merged[n-1].hi = r.hi
			}
			continue
		}
		merged = append(merged, r)
	}
	key := func(v uint64) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	var out []nftables.SetElement
	for _, r := range merged {
		out = append(out, nftables.SetElement{Key: key(r.lo)})
		if r.hi < 1<<32 {
			out = append(out, nftables.SetElement{Key: key(r.hi), IntervalEnd: true})
		}
	}
	return out
}

// --- expression helpers -------------------------------------------------

func metaCmp(key expr.MetaKey, op expr.CmpOp, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: data},
	}
}

func iif(name string) []expr.Any { return metaCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, ifnameKey(name)) }
func oif(name string) []expr.Any { return metaCmp(expr.MetaKeyOIFNAME, expr.CmpOpEq, ifnameKey(name)) }

// isIPv4 must precede any "ip ..." payload match in the inet family, or an
// IPv6 packet's bytes at the same offsets would be read as IPv4 fields.
func isIPv4() []expr.Any {
	return metaCmp(expr.MetaKeyNFPROTO, expr.CmpOpEq, []byte{unix.NFPROTO_IPV4})
}

func ctEstablishedOrRelated() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func l4proto(p byte) []expr.Any { return metaCmp(expr.MetaKeyL4PROTO, expr.CmpOpEq, []byte{p}) }

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

// redirectTo rewrites the destination to the incoming interface's primary
// address (the gateway, on the bridge) and port.
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func payloadNet(off uint32, reg uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4}
}

func lookup(s *nftables.Set, reg uint32, invert bool) *expr.Lookup {
	return &expr.Lookup{SourceRegister: reg, SetName: s.Name, SetID: s.ID, Invert: invert}
}

var (
	accept = &expr.Verdict{Kind: expr.VerdictAccept}
	drop   = &expr.Verdict{Kind: expr.VerdictDrop}
	reject = &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
)

func rule(t *nftables.Table, c *nftables.Chain, parts ...any) *nftables.Rule {
	var ex []expr.Any
	for _, p := range parts {
		switch v := p.(type) {
		case []expr.Any:
			ex = append(ex, v...)
		case expr.Any:
			ex = append(ex, v)
		default:
			panic(fmt.Sprintf("rule part %T", p))
		}
	}
	return &nftables.Rule{Table: t, Chain: c, Exprs: ex}
}

// install replaces this manager's tables atomically (one nf_tables
// transaction: add, delete, re-add), so there is never a moment without
// rules, and other tables on the host are not touched. internet and ports
// are the live elements to load.
func (m *Manager) install(internet []netip.Addr, ports []portElem, h holes) error {
	o := newNFTObjects(m.cfg.Table)
	c := m.nft
	br, gw := m.cfg.Bridge, m.alloc.gateway()

	for _, t := range []*nftables.Table{o.inet, o.br} {
		c.AddTable(t)
		c.DelTable(t)
		c.AddTable(t)
	}

	var never []nftables.SetElement
	if !h.never {
		never = neverElements(append(m.connectedPrefixes(), m.cfg.Subnet)...)
	}
	if err := c.AddSet(o.never, never); err != nil {
		return fmt.Errorf("nft never set: %w", err)
	}
	var inetElems []nftables.SetElement
	for _, a := range internet {
		inetElems = append(inetElems, nftables.SetElement{Key: ip4(a)})
	}
	if err := c.AddSet(o.internet, inetElems); err != nil {
		return fmt.Errorf("nft internet set: %w", err)
	}
	var portElems, addrElems []nftables.SetElement
	for _, p := range ports {
		portElems = append(portElems, nftables.SetElement{Key: ifnameKey(p.veth)})
		addrElems = append(addrElems, nftables.SetElement{Key: portAddrKey(p)})
	}
	if err := c.AddSet(o.ports, portElems); err != nil {
		return fmt.Errorf("nft ports set: %w", err)
	}
	if err := c.AddSet(o.addrs, addrElems); err != nil {
		return fmt.Errorf("nft portaddrs set: %w", err)
	}

	accPolicy := nftables.ChainPolicyAccept
	base := func(t *nftables.Table, name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: &accPolicy})
	}

	// input: a sandbox may answer the host, never call it (except the
	// configured proxy ports on the gateway address).
	in := base(o.inet, "input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	if !h.input {
		c.AddRule(rule(o.inet, in, iif(br), ctEstablishedOrRelated(), accept))
		for _, hp := range []struct {
			proto byte
			ports []uint16
		}{{unix.IPPROTO_TCP, m.cfg.HostTCPPorts}, {unix.IPPROTO_UDP, m.cfg.HostUDPPorts}} {
			for _, port := range hp.ports {
				c.AddRule(rule(o.inet, in, iif(br), isIPv4(), l4proto(hp.proto),
					payloadNet(16, 1), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4(gw)},
					dport(port), accept))
			}
		}
		c.AddRule(rule(o.inet, in, iif(br), drop))
	}

	// forward: the internet check comes before any "established" accept for
	// traffic from sandboxes, so SetInternet(false) also cuts connections
	// that are already open.
	fw := base(o.inet, "forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	if !h.forwardBr {
		// Routed sandbox-to-sandbox traffic (and, with br_netfilter loaded,
		// bridged traffic too) enters and leaves through the bridge.
		c.AddRule(rule(o.inet, fw, iif(br), oif(br), drop))
	}
	// Refused egress is rejected (ICMP administratively prohibited), not
	// dropped: a sandbox without internet gets an immediate error instead of
	// a client hanging through minutes of SYN retries. The answer reveals
	// nothing the sandbox could not learn by trying.
	c.AddRule(rule(o.inet, fw, iif(br), isIPv4(), payloadNet(16, 1), lookup(o.never, 1, false), reject))
	c.AddRule(rule(o.inet, fw, iif(br), isIPv4(), payloadNet(12, 1), lookup(o.internet, 1, false), accept))
	c.AddRule(rule(o.inet, fw, iif(br), reject))
	// Towards sandboxes: replies only; nothing outside may open a
	// connection into one.
	c.AddRule(rule(o.inet, fw, oif(br), ctEstablishedOrRelated(), accept))
	if !h.inbound {
		c.AddRule(rule(o.inet, fw, oif(br), drop))
	}

	// prerouting (nat): hand every TCP connection and every DNS query a
	// sandbox makes to the egress proxy and resolver on the gateway, so a
	// sandbox's own resolver, /etc/hosts or a bare IP never bypass them.
	if m.cfg.ProxyPort != 0 || m.cfg.DNSPort != 0 {
		dnat := base(o.inet, "prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
		if m.cfg.DNSPort != 0 {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				c.AddRule(rule(o.inet, dnat, iif(br), isIPv4(), l4proto(proto), dport(53), redirectTo(m.cfg.DNSPort)))
			}
		}
		if m.cfg.ProxyPort != 0 {
			c.AddRule(rule(o.inet, dnat, iif(br), isIPv4(), l4proto(unix.IPPROTO_TCP), redirectTo(m.cfg.ProxyPort)))
		}
	}

	// postrouting: masquerade sandbox traffic that leaves the bridge.
	nat := base(o.inet, "postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	mask := net4Mask(m.cfg.Subnet.Bits())
	c.AddRule(rule(o.inet, nat, isIPv4(), payloadNet(12, 1),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip4(m.cfg.Subnet.Addr())},
		metaCmp(expr.MetaKeyOIFNAME, expr.CmpOpNeq, ifnameKey(br)),
		&expr.Masq{}))

	// bridge prerouting: anti-spoofing on this manager's ports only (the
	// kernel here may lack meta ibrname, so ports are known by name).
	pre := base(o.br, "prerouting", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRef(-200))
	if !h.antiSpoof {
		ipProto := binary.BigEndian.AppendUint16(nil, unix.ETH_P_IP)
		arpProto := binary.BigEndian.AppendUint16(nil, unix.ETH_P_ARP)
		ours := []expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, lookup(o.ports, 1, false)}
		// iifname . source address must be the pair recorded at Setup.
		// Register 1 holds the 16-byte name; the address goes right after
		// it (32-bit register 12), forming the concatenated key.
		srcPair := func(off uint32) []expr.Any {
			return []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				payloadNet(off, 12),
				lookup(o.addrs, 1, true),
			}
		}
		c.AddRule(rule(o.br, pre, ours, metaCmp(expr.MetaKeyPROTOCOL, expr.CmpOpEq, ipProto), srcPair(12), drop))
		// ARP: only Ethernet/IPv4 ARP (hlen 6, plen 4), so the sender
		// address really is at offset 14, and it must be the sandbox's own:
		// no gratuitous ARP for the gateway or a neighbour.
		c.AddRule(rule(o.br, pre, ours, metaCmp(expr.MetaKeyPROTOCOL, expr.CmpOpEq, arpProto),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 4, Len: 2},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{6, 4}}, drop))
		c.AddRule(rule(o.br, pre, ours, metaCmp(expr.MetaKeyPROTOCOL, expr.CmpOpEq, arpProto), srcPair(14), drop))
		// Anything else (IPv6, VLAN tags, raw ethertypes) is not bridged.
		c.AddRule(rule(o.br, pre, ours, metaCmp(expr.MetaKeyPROTOCOL, expr.CmpOpEq, ipProto), accept))
		c.AddRule(rule(o.br, pre, ours, metaCmp(expr.MetaKeyPROTOCOL, expr.CmpOpEq, arpProto), accept))
		c.AddRule(rule(o.br, pre, ours, drop))
	}

	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables table %q: %w", m.cfg.Table, err)
	}
	m.objs = o
	return nil
}

func net4Mask(bits int) []byte {
	return binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-bits))
}

// elemChange adds and removes set elements in one transaction. Removal is
// written as add-then-delete so it succeeds whether or not the element was
// there (deleting a missing element would fail the whole batch).
type elemChange struct {
	internetAdd, internetDel []netip.Addr
	portAdd, portDel         []portElem
}

func (m *Manager) applyElems(ch elemChange) error {
	o, c := m.objs, m.nft
	ipElems := func(as []netip.Addr) []nftables.SetElement {
		var out []nftables.SetElement
		for _, a := range as {
			out = append(out, nftables.SetElement{Key: ip4(a)})
		}
		return out
	}
	portElems := func(ps []portElem) (names, pairs []nftables.SetElement) {
		for _, p := range ps {
			names = append(names, nftables.SetElement{Key: ifnameKey(p.veth)})
			pairs = append(pairs, nftables.SetElement{Key: portAddrKey(p)})
		}
		return
	}
	var errs []error
	add := func(s *nftables.Set, e []nftables.SetElement) {
		if len(e) > 0 {
			errs = append(errs, c.SetAddElements(s, e))
		}
	}
	del := func(s *nftables.Set, e []nftables.SetElement) {
		if len(e) > 0 {
			errs = append(errs, c.SetAddElements(s, e), c.SetDeleteElements(s, e))
		}
	}
	add(o.internet, ipElems(ch.internetAdd))
	del(o.internet, ipElems(ch.internetDel))
	n, p := portElems(ch.portAdd)
	add(o.ports, n)
	add(o.addrs, p)
	n, p = portElems(ch.portDel)
	del(o.ports, n)
	del(o.addrs, p)
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("queue nft set change: %w", err)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("update nft sets in table %q: %w", m.cfg.Table, err)
	}
	return nil
}

// readInternetSet returns the addresses currently in an existing table's
// internet set, so a restart keeps each sandbox's internet setting.
func (m *Manager) readInternetSet() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	t := &nftables.Table{Name: m.cfg.Table, Family: nftables.TableFamilyINet}
	s, err := m.nft.GetSetByName(t, setInternet)
	if err != nil {
		return out // no table yet
	}
	elems, err := m.nft.GetSetElements(s)
	if err != nil {
		return out
	}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok && len(e.Key) == 4 {
			out[a] = true
		}
	}
	return out
}

// reinstall rebuilds the tables from the manager's records. Tests use it
// to open a single hole for a negative control and to close it again.
func (m *Manager) reinstall(h holes) error {
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	var inet []netip.Addr
	var ports []portElem
	m.mu.Lock()
	for id, s := range m.sbx {
		if !s.ip.IsValid() {
			continue
		}
		ports = append(ports, portElem{hostVethName(m.cfg.Bridge, id), s.ip})
		if s.internet {
			inet = append(inet, s.ip)
		}
	}
	m.mu.Unlock()
	return m.install(inet, ports, h)
}

// connectedPrefixes returns the IPv4 networks the host is directly attached
// to (link-scope routes of the main table). A host whose LAN uses public
// addresses would otherwise let sandboxes with internet on reach its
// neighbours, upstream router admin pages and the like; traffic that merely
// passes through the LAN gateway is unaffected, since only destinations are
// matched. It is a snapshot taken when the table is built (New).
func (m *Manager) connectedPrefixes() []netip.Prefix {
	routes, err := m.nl.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil || r.Scope != netlink.SCOPE_LINK || r.Gw != nil {
			continue
		}
		a, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		bits, _ := r.Dst.Mask.Size()
		if ok && bits > 0 {
			out = append(out, netip.PrefixFrom(a, bits))
		}
	}
	return out
}

package network

import (
	"encoding/binary"
	"net/netip"

	"github.com/berth-sh/berth/internal/errdefs"
)

// MaxBridgePorts is how many sandboxes one Manager (one bridge) can hold:
// a Linux bridge numbers its ports in 10 bits and never uses port 0
// (BR_MAX_PORTS is 1024), so the 1,024th veth would fail with EXFULL.
// Past it a create is refused with resource_exhausted before anything is
// made; more sandboxes on one host need a second daemon with its own bridge.
const MaxBridgePorts = 1023

// allocator hands out sandbox addresses from a subnet. The first address is
// the gateway; the network and broadcast addresses are never used. It is
// next-fit: a freed address is handed out again only after the rest of the
// range has been tried, so a new sandbox rarely inherits conntrack state or
// ARP cache entries that still point at a sandbox that just went away.
// Not safe for concurrent use; Manager guards it.
type allocator struct {
	pfx   netip.Prefix
	base  uint32 // network address
	size  uint32 // addresses in the subnet
	next  uint32 // offset to try first
	inUse map[uint32]string
	ports int // most addresses in use at once (MaxBridgePorts; tests lower it)
}

func newAllocator(p netip.Prefix) *allocator {
	b := p.Masked().Addr().As4()
	return &allocator{
		pfx:   p.Masked(),
		base:  binary.BigEndian.Uint32(b[:]),
		size:  uint32(1) << (32 - p.Bits()),
		next:  2,
		inUse: map[uint32]string{},
		ports: MaxBridgePorts,
	}
}

func (a *allocator) addr(off uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a.base+off)
	return netip.AddrFrom4(b)
}

func (a *allocator) offset(ip netip.Addr) (uint32, bool) {
	if !ip.Is4() {
		return 0, false
	}
	b := ip.As4()
	v := binary.BigEndian.Uint32(b[:])
	if v < a.base || v-a.base >= a.size {
		return 0, false
	}
	off := v - a.base
	// 0 = network, 1 = gateway, size-1 = broadcast.
	return off, off >= 2 && off < a.size-1
}

func (a *allocator) gateway() netip.Addr { return a.addr(1) }

// allocate returns a free address and records it as owned by id.
func (a *allocator) allocate(id string) (netip.Addr, error) {
	if len(a.inUse) >= a.ports {
		return netip.Addr{}, errdefs.ResourceExhausted("no free bridge port: %d sandboxes are attached, the most a Linux bridge takes (%d ports); run another berth serve with its own --bridge and --subnet for more", len(a.inUse), a.ports)
	}
	usable := a.size - 3
	for i := uint32(0); i < usable; i++ {
		off := a.next
		a.next++
		if a.next >= a.size-1 {
			a.next = 2
		}
		if _, taken := a.inUse[off]; !taken {
			a.inUse[off] = id
			return a.addr(off), nil
		}
	}
	return netip.Addr{}, errdefs.ResourceExhausted("no free sandbox address left in %s", a.pfx)
}

// reserve marks ip as owned by id (used when rebuilding after a restart). It
// reports false if ip is outside the usable range or owned by another id.
func (a *allocator) reserve(ip netip.Addr, id string) bool {
	off, ok := a.offset(ip)
	if !ok {
		return false
	}
	if owner, taken := a.inUse[off]; taken && owner != id {
		return false
	}
	a.inUse[off] = id
	// Continue after the highest address seen so a restart keeps the
	// next-fit order instead of reusing recently freed addresses first.
	if off >= a.next {
		a.next = off + 1
		if a.next >= a.size-1 {
			a.next = 2
		}
	}
	return true
}

// release frees ip if id owns it.
func (a *allocator) release(ip netip.Addr, id string) {
	off, ok := a.offset(ip)
	if !ok {
		return
	}
	if a.inUse[off] == id {
		delete(a.inUse, off)
	}
}

package network

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestValidateID(t *testing.T) {
	good := []string{"a", "sbx-1", "Agent_session.47", "0abc"}
	bad := []string{"", ".", "..", "../etc", "a/b", "-x", ".hidden", "a\x00b", "a b", "é", string(make([]byte, maxIDLen+1))}
	for _, id := range good {
		if err := validateID(id); err != nil {
			t.Errorf("validateID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range bad {
		if err := validateID(id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("validateID(%q) = %v, want invalid argument", id, err)
		}
	}
}

func TestHostVethName(t *testing.T) {
	long := string(make([]byte, 0, 128)) + "a-very-long-sandbox-id-that-goes-on-and-on-and-on"
	n := hostVethName("berth0", long)
	if len(n) > 15 || n[:2] != vethPrefix {
		t.Fatalf("name %q: want ≤15 chars starting with %q", n, vethPrefix)
	}
	if hostVethName("berth0", "x") == hostVethName("other", "x") {
		t.Fatal("same id on two bridges must get different veth names")
	}
	if a, b := hostVethName("berth0", "x"), hostVethName("berth0", "x"); a != b {
		t.Fatal("veth name must be deterministic")
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Bridge != "berth0" || c.Subnet != defaultSubnet || c.NetNSDir != "/run/berth/netns" || c.Table != "berth" {
		t.Fatalf("defaults: %+v", c)
	}
	for _, bad := range []Config{
		{Bridge: "a-bridge-name-too-long"},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
		{Subnet: netip.MustParsePrefix("10.0.0.0/31")},
		{NetNSDir: "relative/dir"},
		{Table: "bad table"},
	} {
		if _, err := bad.withDefaults(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: err = %v, want invalid argument", bad, err)
		}
	}
}

func TestAllocator(t *testing.T) {
	a := newAllocator(netip.MustParsePrefix("10.1.2.0/29")) // .2-.6 usable
	if g := a.gateway(); g != netip.MustParseAddr("10.1.2.1") {
		t.Fatalf("gateway %s", g)
	}
	var got []netip.Addr
	for i := 0; i < 5; i++ {
		ip, err := a.allocate("s")
		if err != nil {
			t.Fatalf("allocate %d: %v", i, err)
		}
		got = append(got, ip)
	}
	if got[0] != netip.MustParseAddr("10.1.2.2") || got[4] != netip.MustParseAddr("10.1.2.6") {
		t.Fatalf("allocated %v", got)
	}
	if _, err := a.allocate("x"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("full subnet: err = %v, want resource exhausted", err)
	}
	// Next-fit: freeing .3 then .5 hands out .3 first (scan wraps to it).
	a.release(got[1], "s")
	a.release(got[3], "s")
	a.release(got[3], "other") // not the owner: no effect on anything
	ip, _ := a.allocate("y")
	if ip != got[1] {
		t.Fatalf("after wrap got %s, want %s", ip, got[1])
	}

	// A bridge's port limit refuses before the subnet is full.
	p := newAllocator(netip.MustParsePrefix("10.1.2.0/24"))
	if p.ports != MaxBridgePorts {
		t.Fatalf("port limit %d, want %d", p.ports, MaxBridgePorts)
	}
	p.ports = 2
	for i := 0; i < 2; i++ {
		if _, err := p.allocate("p"); err != nil {
			t.Fatalf("allocate %d under the port limit: %v", i, err)
		}
	}
	if _, err := p.allocate("p"); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "bridge port") {
		t.Fatalf("past the port limit: err = %v, want resource exhausted naming the bridge port", err)
	}
	p.release(netip.MustParseAddr("10.1.2.2"), "p")
	if _, err := p.allocate("p"); err != nil {
		t.Fatalf("a released port must be free again: %v", err)
	}

	b := newAllocator(netip.MustParsePrefix("10.1.2.0/24"))
	for _, bad := range []string{"10.1.2.0", "10.1.2.1", "10.1.2.255", "10.1.3.5", "::1"} {
		if b.reserve(netip.MustParseAddr(bad), "z") {
			t.Errorf("reserve(%s) accepted", bad)
		}
	}
	if !b.reserve(netip.MustParseAddr("10.1.2.40"), "a") || b.reserve(netip.MustParseAddr("10.1.2.40"), "b") {
		t.Fatal("reserve must take a free address once and refuse a second owner")
	}
	// After a restart the scan continues past the highest reserved address.
	if ip, _ := b.allocate("c"); ip != netip.MustParseAddr("10.1.2.41") {
		t.Fatalf("after reserve got %s", ip)
	}
}

func TestNeverElements(t *testing.T) {
	key := func(s string) string { return netip.MustParseAddr(s).String() }
	els := neverElements(netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("192.168.7.0/24"), netip.MustParsePrefix("fd00::/8"))
	type el struct {
		ip  string
		end bool
	}
	var got []el
	for _, e := range els {
		a, _ := netip.AddrFromSlice(e.Key)
		got = append(got, el{a.String(), e.IntervalEnd})
	}
	want := []el{
		{key("0.0.0.0"), false}, {key("1.0.0.0"), true},
		{key("10.0.0.0"), false}, {key("11.0.0.0"), true},
		{key("100.64.0.0"), false}, {key("100.128.0.0"), true},
		{key("127.0.0.0"), false}, {key("128.0.0.0"), true},
		{key("169.254.0.0"), false}, {key("169.255.0.0"), true},
		{key("172.16.0.0"), false}, {key("172.32.0.0"), true},
		{key("192.168.0.0"), false}, {key("192.169.0.0"), true},
		{key("198.18.0.0"), false}, {key("198.18.1.0"), true},
		{key("224.0.0.0"), false}, // 224/4 and 240/4 merge and run to the top
	}
	if len(got) != len(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: got %v want %v (all: %v)", i, got[i], want[i], got)
		}
	}
	// Prefixes inside existing ranges (and IPv6 ones) merge away instead
	// of overlapping; 192.168.7.0/24 above already did.
	if n := len(neverElements(netip.MustParsePrefix("10.88.0.0/16"))); n != len(want)-2 {
		t.Fatalf("subnet inside 10/8: %d elements, want %d", n, len(want)-2)
	}
}

package network

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/berth-sh/berth/internal/errdefs"
)

// setElems reads one of the manager's sets as printable strings.
func setElems(t *testing.T, e *testEnv, fam nftables.TableFamily, set string) []string {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.GetSetByName(&nftables.Table{Name: e.cfg.Table, Family: fam}, set)
	if err != nil {
		t.Fatalf("get set %s: %v", set, err)
	}
	els, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, el := range els {
		k := el.Key
		switch {
		case len(k) == 4:
			a, _ := netip.AddrFromSlice(k)
			out = append(out, a.String())
		case len(k) == 16:
			out = append(out, strings.TrimRight(string(k), "\x00"))
		case len(k) == 20:
			a, _ := netip.AddrFromSlice(k[16:])
			out = append(out, strings.TrimRight(string(k[:16]), "\x00")+"."+a.String())
		}
	}
	sort.Strings(out)
	return out
}

func wantSets(t *testing.T, e *testEnv, internet []string, ports ...*Attachment) {
	t.Helper()
	var names, pairs []string
	for _, p := range ports {
		names = append(names, p.HostVeth)
		pairs = append(pairs, p.HostVeth+"."+p.IP.String())
	}
	sort.Strings(internet)
	sort.Strings(names)
	sort.Strings(pairs)
	check := func(fam nftables.TableFamily, set string, want []string) {
		got := setElems(t, e, fam, set)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("set %s = %v, want %v", set, got, want)
		}
	}
	check(nftables.TableFamilyINet, setInternet, internet)
	check(nftables.TableFamilyBridge, setPorts, names)
	check(nftables.TableFamilyBridge, setPortAddrs, pairs)
}

func ownedLinks(t *testing.T, e *testEnv) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Alias, aliasPrefix(e.cfg.Bridge)) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

func TestSetupTeardownLifecycle(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	a := mustSetup(t, e.m, "a", true)
	b := mustSetup(t, e.m, "b", false)

	if a.IP == b.IP || !e.cfg.Subnet.Contains(a.IP) || a.Gateway != netip.MustParseAddr(e.cfg.Subnet.Addr().Next().String()) {
		t.Fatalf("addresses: a=%+v b=%+v", a, b)
	}
	for _, x := range []*Attachment{a, b} {
		if !isNetNSFile(x.NetNSPath) {
			t.Errorf("%s is not a netns mount", x.NetNSPath)
		}
		l, err := netlink.LinkByName(x.HostVeth)
		if err != nil {
			t.Fatalf("host veth %s: %v", x.HostVeth, err)
		}
		br, _ := netlink.LinkByName(e.cfg.Bridge)
		if l.Attrs().MasterIndex != br.Attrs().Index {
			t.Errorf("%s not on bridge %s", x.HostVeth, e.cfg.Bridge)
		}
		pi, err := netlink.LinkGetProtinfo(l)
		if err != nil || !pi.Isolated {
			t.Errorf("%s: bridge port isolated=%v err=%v, want isolated", x.HostVeth, pi.Isolated, err)
		}
	}
	wantSets(t, e, []string{a.IP.String()}, a, b)
	if ids, _ := e.m.List(ctx); strings.Join(ids, ",") != "a,b" {
		t.Fatalf("List = %v", ids)
	}

	// Idempotent Setup: same address, internet setting updated.
	a2, err := e.m.Setup(ctx, "a", false)
	if err != nil || a2.IP != a.IP || a2.Internet {
		t.Fatalf("Setup(a) again = %+v, %v", a2, err)
	}
	wantSets(t, e, nil, a, b)

	if err := e.m.Teardown(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Teardown(ctx, "a"); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	if _, err := os.Stat(a.NetNSPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns file still there: %v", err)
	}
	if _, err := netlink.LinkByName(a.HostVeth); err == nil {
		t.Errorf("veth %s still there", a.HostVeth)
	}
	wantSets(t, e, nil, b)

	if err := e.m.SetInternet(ctx, "a", true); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetInternet on torn-down sandbox: %v, want not found", err)
	}
	for _, bad := range []string{"../etc", "a/b", ""} {
		if _, err := e.m.Setup(ctx, bad, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Setup(%q): %v, want invalid argument", bad, err)
		}
		if err := e.m.Teardown(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Teardown(%q): %v, want invalid argument", bad, err)
		}
	}
}

func TestCleanupRemovesOrphans(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	keep := mustSetup(t, e.m, "keep", true)
	gone := mustSetup(t, e.m, "gone", true)

	// Leftovers of a crash: a veth with our alias but no netns, and a netns
	// file that was never mounted.
	la := netlink.NewLinkAttrs()
	la.Name = hostVethName(e.cfg.Bridge, "ghost")
	ghost := &netlink.Veth{LinkAttrs: la, PeerName: "bp" + randHex(10)}
	if err := netlink.LinkAdd(ghost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(ghost) }) // in case Cleanup fails to
	if err := netlink.LinkSetAlias(ghost, vethAlias(e.cfg.Bridge, "ghost")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.m.nsPath("zombie"), nil, 0o444); err != nil {
		t.Fatal(err)
	}

	if err := e.m.Cleanup(ctx, map[string]bool{"keep": true}); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.m.List(ctx); strings.Join(ids, ",") != "keep" {
		t.Fatalf("after Cleanup List = %v, want [keep]", ids)
	}
	if got := ownedLinks(t, e); strings.Join(got, ",") != keep.HostVeth {
		t.Fatalf("owned veths = %v, want only %s", got, keep.HostVeth)
	}
	wantSets(t, e, []string{keep.IP.String()}, keep)
	_ = gone

	if err := e.m.Cleanup(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ids, _ := e.m.List(ctx); len(ids) != 0 {
		t.Fatalf("after Cleanup(nil) List = %v", ids)
	}
	if got := ownedLinks(t, e); len(got) != 0 {
		t.Fatalf("veths left: %v", got)
	}
	wantSets(t, e, nil)
	if len(e.m.alloc.inUse) != 0 {
		t.Fatalf("addresses still allocated: %v", e.m.alloc.inUse)
	}
}

// A daemon restart (Close, then New on the same config) adopts live
// sandboxes with their addresses and internet settings and never hands out
// an address that is still in use.
func TestRestartRebuildsState(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	a := mustSetup(t, e.m, "a", true)
	b := mustSetup(t, e.m, "b", false)
	c := mustSetup(t, e.m, "c", false)
	if err := e.m.Teardown(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	// A crash mid-Setup: d's netns exists but its veth is gone.
	d := mustSetup(t, e.m, "d", true)
	if l, err := netlink.LinkByName(d.HostVeth); err == nil {
		_ = netlink.LinkDel(l)
	}
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}

	e.m = e.newManager(t)
	if ids, _ := e.m.List(ctx); strings.Join(ids, ",") != "a,c,d" {
		t.Fatalf("List after restart = %v", ids)
	}
	// Live sandboxes keep their addresses and internet settings, and the
	// sets are rebuilt for them only (d is broken, so not in the sets).
	wantSets(t, e, []string{a.IP.String()}, a, c)
	a2, err := e.m.Setup(ctx, "a", true)
	if err != nil || a2.IP != a.IP || !a2.Internet {
		t.Fatalf("adopted a = %+v, %v; want ip %s internet on", a2, err, a.IP)
	}
	used := map[netip.Addr]bool{a.IP: true, c.IP: true}
	for _, id := range []string{"x1", "x2", "x3"} {
		x := mustSetup(t, e.m, id, false)
		if used[x.IP] {
			t.Fatalf("%s got %s, which a live sandbox still has", id, x.IP)
		}
		used[x.IP] = true
	}
	// The broken one is rebuilt by Setup.
	d2 := mustSetup(t, e.m, "d", true)
	if used[d2.IP] {
		t.Fatalf("rebuilt d got %s, already in use", d2.IP)
	}
	if _, err := netlink.LinkByName(d2.HostVeth); err != nil {
		t.Fatalf("rebuilt d has no veth: %v", err)
	}
	_ = b
}

// Concurrent Setup/Teardown of many ids: no duplicate addresses, nothing
// left behind. Run with -race to check the locking.
func TestConcurrentSetupTeardown(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	ips := make([]netip.Addr, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a, err := e.m.Setup(ctx, "c"+string(rune('a'+i)), i%2 == 0)
			if err == nil {
				ips[i] = a.IP
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Setup %d: %v", i, err)
		}
		if seen[ips[i]] {
			t.Fatalf("address %s handed out twice", ips[i])
		}
		seen[ips[i]] = true
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = e.m.Teardown(ctx, "c"+string(rune('a'+i)))
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Teardown %d: %v", i, err)
		}
	}
	if ids, _ := e.m.List(ctx); len(ids) != 0 {
		t.Fatalf("left: %v", ids)
	}
	if got := ownedLinks(t, e); len(got) != 0 {
		t.Fatalf("veths left: %v", got)
	}
	wantSets(t, e, nil)
}

// TestTimings reports Setup and Teardown latency. It asserts nothing about
// speed (that would depend on the machine); it only reports.
func TestTimings(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	const n = 40
	var setup, teardown []time.Duration
	for i := 0; i < n; i++ {
		id := "t" + randHex(6)
		t0 := time.Now()
		if _, err := e.m.Setup(ctx, id, i%2 == 0); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if err := e.m.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
		setup = append(setup, t1.Sub(t0))
		teardown = append(teardown, time.Since(t1))
	}
	q := func(d []time.Duration, p float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(float64(len(s)-1)*p)]
	}
	t.Logf("Setup    p50 %v  p90 %v  max %v (n=%d)", q(setup, .5), q(setup, .9), q(setup, 1), n)
	t.Logf("Teardown p50 %v  p90 %v  max %v (n=%d)", q(teardown, .5), q(teardown, .9), q(teardown, 1), n)
}

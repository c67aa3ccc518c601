package egress

import (
	"net/netip"
	"testing"

	"github.com/berth-sh/berth/api"
)

func TestParseRule(t *testing.T) {
	good := map[string]Rule{
		"api.github.com":     {Host: "api.github.com"},
		"API.GitHub.com.":    {Host: "api.github.com"},
		"*.example.com":      {Host: "*.example.com"},
		"example.com:8443":   {Host: "example.com", Port: 8443},
		"203.0.113.7":        {Prefix: netip.MustParsePrefix("203.0.113.7/32")},
		"203.0.113.0/24:22":  {Prefix: netip.MustParsePrefix("203.0.113.0/24"), Port: 22},
		"[2001:db8::/32]:80": {Prefix: netip.MustParsePrefix("2001:db8::/32"), Port: 80},
		"::ffff:10.0.0.1":    {Prefix: netip.MustParsePrefix("10.0.0.1/32")},
	}
	for in, want := range good {
		r, err := ParseRule(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if r.Host != want.Host || r.Prefix != want.Prefix || r.Port != want.Port {
			t.Errorf("%q = %+v, want %+v", in, r, want)
		}
	}
	for _, in := range []string{"", "*", "*.", "a..b", "foo.*.com", "x:0", "x:70000", "1.2.3.4:", "[::1", "bad host", "10.0.0.1/33", "a/b"} {
		if _, err := ParseRule(in); err == nil {
			t.Errorf("%q parsed, want error", in)
		}
	}
}

func TestDecide(t *testing.T) {
	p, err := Compile(api.NetworkPolicy{
		Allow:  []string{"api.internal.test", "*.pkg.test", "203.0.113.0/24:22"},
		Deny:   []string{"bad.pkg.test", "api.internal.test:8080"},
		Inject: []api.InjectRule{{Host: "gh.test", SetHeaders: map[string]string{"authorization": "Bearer ${secret:gh}"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("203.0.113.9")
	cases := []struct {
		host string
		ip   netip.Addr
		port uint16
		ok   bool
	}{
		{"api.internal.test", ip, 443, true},
		{"api.internal.test", ip, 8080, false},
		{"api.internal.test", netip.Addr{}, 0, true}, // DNS: a port-only deny does not hide the name
		{"other.test", ip, 443, false},
		{"x.pkg.test", ip, 80, true},
		{"a.b.pkg.test", ip, 80, true},
		{"pkg.test", ip, 80, false},
		{"bad.pkg.test", ip, 80, false},
		{"bad.pkg.test", netip.Addr{}, 0, false},
		{"", ip, 22, true},
		{"", ip, 23, false},
		{"203.0.113.9", ip, 443, false}, // bare IP: matched as an address, port 443 not allowed
		{"gh.test", ip, 443, true},
		{"gh.test", ip, 80, false},
	}
	for _, c := range cases {
		if d := p.Decide(c.host, c.ip, c.port); d.Allowed != c.ok {
			t.Errorf("Decide(%q, %v, %d) = %+v, want allowed=%v", c.host, c.ip, c.port, d, c.ok)
		}
	}
	p.Internet = true
	if d := p.Decide("other.test", ip, 443); !d.Allowed || d.Rule != "internet" {
		t.Errorf("internet: %+v", d)
	}
	if d := p.Decide("bad.pkg.test", ip, 443); d.Allowed {
		t.Errorf("deny beats internet: %+v", d)
	}
	if p.RawForwarding() {
		t.Error("raw forwarding with deny rules")
	}
}

func TestCompileRejects(t *testing.T) {
	bad := []api.NetworkPolicy{
		{Inject: []api.InjectRule{{Host: "x.test", SetHeaders: map[string]string{"Host": "y"}}}},
		{Inject: []api.InjectRule{{Host: "x.test", SetHeaders: map[string]string{"X-A": "a\r\nb"}}}},
		{Inject: []api.InjectRule{{Host: "x.test", SetHeaders: map[string]string{"X-A": "${secret:../x}"}}}},
		{Inject: []api.InjectRule{{Host: "10.0.0.1", SetHeaders: map[string]string{"X-A": "a"}}}},
		{Inject: []api.InjectRule{{Host: "x.test"}}},
		{Allow: []string{"not a rule"}},
	}
	for i, p := range bad {
		if _, err := Compile(p); err == nil {
			t.Errorf("case %d compiled", i)
		}
	}
}

func TestExpand(t *testing.T) {
	get := func(n string) (string, bool) {
		if n == "gh" {
			return "s3cr3t", true
		}
		if n == "nl" {
			return "a\nb", true
		}
		return "", false
	}
	if v, err := Expand("Bearer ${secret:gh}", get); err != nil || v != "Bearer s3cr3t" {
		t.Fatalf("%q %v", v, err)
	}
	if _, err := Expand("Bearer ${secret:missing}", get); err == nil {
		t.Fatal("missing secret expanded")
	}
	if _, err := Expand("${secret:nl}", get); err == nil {
		t.Fatal("line break in header")
	}
}

func TestBlocklist(t *testing.T) {
	b, err := NewBlocklist(netip.MustParsePrefix("10.88.0.0/16"), []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	b.hostAddrsFn = func() []netip.Prefix {
		return []netip.Prefix{netip.MustParsePrefix("198.51.100.7/32"), netip.MustParsePrefix("198.51.100.0/24")}
	}
	blocked := []string{"127.0.0.1", "169.254.169.254", "10.0.0.1", "172.16.3.4", "192.168.1.1", "100.64.0.1",
		"0.0.0.0", "224.0.0.1", "255.255.255.255", "10.88.0.5", "198.51.100.7", "198.51.100.9", "10.99.1.1",
		"::1", "fe80::1", "fd00::1", "::ffff:10.0.0.1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "2002:a00:1::1", "::a00:1"}
	for _, s := range blocked {
		if why := b.Blocked(netip.MustParseAddr(s)); why == "" {
			t.Errorf("%s not blocked", s)
		}
	}
	for _, s := range []string{"203.0.113.10", "8.8.8.8", "10.99.0.5", "2001:db8::1", "::ffff:203.0.113.10"} {
		if why := b.Blocked(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s blocked: %s", s, why)
		}
	}
	if _, err := NewBlocklist(netip.MustParsePrefix("10.88.0.0/16"), []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16")}); err == nil {
		t.Error("link-local opened")
	}
	if _, err := NewBlocklist(netip.MustParsePrefix("10.88.0.0/16"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); err == nil {
		t.Error("range over the sandbox subnet opened")
	}
}

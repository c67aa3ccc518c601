package egress

import (
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Limits on a policy's size, so a request cannot make every connection
// walk a huge list.
const (
	maxRules   = 256
	maxHeaders = 16
)

// Rule is one parsed allow or deny entry.
type Rule struct {
	Raw    string
	Host   string       // lower-case name or "*.suffix"; empty for an address rule
	Prefix netip.Prefix // valid for an address rule
	Port   uint16       // 0: any port
}

// Inject is one parsed injection rule.
type Inject struct {
	Host    string
	Headers []Header
}

// Header is one header to set; Value may hold ${secret:NAME} references.
type Header struct {
	Name, Value string
}

// Policy is a compiled api.NetworkPolicy.
type Policy struct {
	Internet    bool
	Allow, Deny []Rule
	Inject      []Inject
}

// Decision is the outcome of a policy check and the rule that made it.
type Decision struct {
	Allowed bool
	Rule    string
}

var (
	labelRE  = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)
	secretRE = regexp.MustCompile(`\$\{secret:([^}]*)\}`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
)

// ValidSecretName reports whether s can name a secret.
func ValidSecretName(s string) error {
	if !nameRE.MatchString(s) {
		return errdefs.InvalidArgument("secret name %q must be 1-64 characters of [A-Za-z0-9_.-], starting with a letter or digit", s)
	}
	return nil
}

// validHostPattern accepts a DNS name or "*." followed by one.
func validHostPattern(h string) bool {
	name := strings.TrimPrefix(h, "*.")
	if name == "" || len(name) > 253 || strings.Contains(name, "*") {
		return false
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !labelRE.MatchString(l) {
			return false
		}
	}
	// An all-numeric last label would make "10.0.0.1" a host pattern.
	_, err := strconv.Atoi(labels[len(labels)-1])
	return err != nil
}

// ParseRule parses an allow or deny entry: HOST, *.DOMAIN, IP, CIDR, each
// optionally followed by :PORT (IPv6 in brackets when a port follows).
func ParseRule(s string) (Rule, error) {
	r := Rule{Raw: s}
	bad := func(why string) (Rule, error) {
		return Rule{}, errdefs.InvalidArgument("network rule %q: %s (want HOST, *.DOMAIN, IP or CIDR, optionally :PORT)", s, why)
	}
	body := strings.TrimSpace(s)
	if body == "" {
		return bad("empty")
	}
	// Split off a port: "[v6]:p", "v4:p", "v4/n:p", "host:p".
	if strings.HasPrefix(body, "[") {
		end := strings.Index(body, "]")
		if end < 0 {
			return bad("unclosed [")
		}
		rest := body[end+1:]
		body = body[1:end]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return bad("text after ]")
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return bad(err.Error())
			}
			r.Port = p
		}
	} else if strings.Count(body, ":") == 1 {
		h, p, _ := strings.Cut(body, ":")
		port, err := parsePort(p)
		if err != nil {
			return bad(err.Error())
		}
		body, r.Port = h, port
	}
	if pf, err := netip.ParsePrefix(body); err == nil {
		r.Prefix = pf.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(body); err == nil {
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	h := strings.ToLower(strings.TrimSuffix(body, "."))
	if !validHostPattern(h) {
		return bad("not a host name, wildcard, IP or CIDR")
	}
	r.Host = h
	return r, nil
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q must be 1-65535", p)
	}
	return uint16(n), nil
}

// Compile validates p. Errors are errdefs invalid-argument.
func Compile(p api.NetworkPolicy) (*Policy, error) {
	out := &Policy{Internet: p.Internet}
	if len(p.Allow)+len(p.Deny)+len(p.Inject) > maxRules {
		return nil, errdefs.InvalidArgument("network policy has more than %d rules", maxRules)
	}
	for _, list := range []struct {
		in  []string
		out *[]Rule
	}{{p.Allow, &out.Allow}, {p.Deny, &out.Deny}} {
		for _, s := range list.in {
			r, err := ParseRule(s)
			if err != nil {
				return nil, err
			}
			*list.out = append(*list.out, r)
		}
	}
	for _, in := range p.Inject {
		h := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(in.Host), "."))
		if !validHostPattern(h) {
			return nil, errdefs.InvalidArgument("inject host %q must be a host name or *.DOMAIN", in.Host)
		}
		if len(in.SetHeaders) == 0 || len(in.SetHeaders) > maxHeaders {
			return nil, errdefs.InvalidArgument("inject rule for %q needs 1-%d headers", in.Host, maxHeaders)
		}
		inj := Inject{Host: h}
		for k, v := range in.SetHeaders {
			if !validHeaderName(k) {
				return nil, errdefs.InvalidArgument("inject rule for %q: invalid header name %q", in.Host, k)
			}
			if strings.ContainsAny(v, "\r\n\x00") || len(v) > 8192 {
				return nil, errdefs.InvalidArgument("inject rule for %q: header %s has an invalid value", in.Host, k)
			}
			for _, m := range secretRE.FindAllStringSubmatch(v, -1) {
				if err := ValidSecretName(m[1]); err != nil {
					return nil, err
				}
			}
			inj.Headers = append(inj.Headers, Header{Name: http.CanonicalHeaderKey(k), Value: v})
		}
		out.Inject = append(out.Inject, inj)
	}
	return out, nil
}

func validHeaderName(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	// Headers that steer the proxy or the framing are not injectable.
	switch strings.ToLower(k) {
	case "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer":
		return false
	}
	return true
}

// hostMatch reports whether pattern (name or *.suffix) matches host. A
// wildcard matches names below the suffix at any depth, not the suffix.
func hostMatch(pattern, host string) bool {
	if suf, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suf)
	}
	return pattern == host
}

// NormalizeHost lower-cases a Host header or SNI and strips a port and a
// trailing dot. It returns "" for anything that is not a plausible name or
// IP literal.
func NormalizeHost(h string) string {
	h = strings.TrimSpace(h)
	if strings.HasPrefix(h, "[") {
		if end := strings.Index(h, "]"); end > 0 {
			h = h[1:end]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if _, err := netip.ParseAddr(h); err == nil {
		return h
	}
	if !validHostPattern(h) || strings.HasPrefix(h, "*.") {
		return ""
	}
	return h
}

func (r Rule) matches(host string, ip netip.Addr, port uint16) bool {
	if r.Port != 0 && port != 0 && r.Port != port {
		return false
	}
	if r.Host != "" {
		return host != "" && hostMatch(r.Host, host)
	}
	return ip.IsValid() && r.Prefix.Contains(ip.Unmap())
}

// Decide checks a connection. host is the HTTP Host or TLS SNI ("" for
// other TCP); an IP-literal host is matched as an address. ip is the
// destination address when known; port 0 means "any" (a DNS lookup).
func (p *Policy) Decide(host string, ip netip.Addr, port uint16) Decision {
	if a, err := netip.ParseAddr(host); err == nil {
		host, ip = "", a.Unmap()
	}
	for _, r := range p.Deny {
		// A lookup is refused only by a rule that denies every port.
		if port == 0 && r.Port != 0 {
			continue
		}
		if r.matches(host, ip, port) {
			return Decision{false, "deny:" + r.Raw}
		}
	}
	for _, r := range p.Allow {
		if r.matches(host, ip, port) {
			return Decision{true, "allow:" + r.Raw}
		}
	}
	if host != "" && p.InjectFor(host) != nil && (port == 0 || port == 443) {
		return Decision{true, "inject:" + p.InjectFor(host).Host}
	}
	if p.Internet {
		return Decision{true, "internet"}
	}
	return Decision{false, "default"}
}

// InjectFor returns the first injection rule for host, or nil.
func (p *Policy) InjectFor(host string) *Inject {
	for i := range p.Inject {
		if hostMatch(p.Inject[i].Host, host) {
			return &p.Inject[i]
		}
	}
	return nil
}

// RawForwarding reports whether the sandbox's non-TCP traffic (UDP, ICMP)
// may be forwarded without the proxy: only when the policy lets
// everything out, since no rule can be checked on it.
func (p *Policy) RawForwarding() bool { return p.Internet && len(p.Deny) == 0 }

// Expand replaces ${secret:NAME} references with values from get. A
// missing secret is an error (the request is refused rather than sent
// without its credential).
func Expand(v string, get func(name string) (string, bool)) (string, error) {
	var missing string
	out := secretRE.ReplaceAllStringFunc(v, func(m string) string {
		name := secretRE.FindStringSubmatch(m)[1]
		s, ok := get(name)
		if !ok {
			missing = name
		}
		return s
	})
	if missing != "" {
		return "", errdefs.FailedPrecondition("secret %q is not set", missing)
	}
	if strings.ContainsAny(out, "\r\n\x00") {
		return "", errdefs.FailedPrecondition("a secret holds a line break and cannot go into a header")
	}
	return out, nil
}

package preview

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/exposure"
)

// ErrStale is returned by a Resolver for a URL made in an earlier run of a
// sandbox that has since restarted (or is sleeping). It is answered with
// 410 Gone and must not wake the sandbox; exposing the port again makes a
// URL for the current run. It is exposure.ErrStale (the node returns it).
var ErrStale = exposure.ErrStale

// Exposure is one exposed port of a sandbox (the node keeps them:
// package internal/exposure holds the type for both).
type Exposure = exposure.Exposure

// DialFunc opens one new connection to the exposed port.
type DialFunc = exposure.DialFunc

// Resolver finds exposures. The controller implements it.
type Resolver interface {
	// Lookup returns the exposure for (sandbox, port, token) and a dialer
	// to the port if the sandbox is running in the run the exposure was
	// made in. It must not wake a sleeping sandbox. Errors: an
	// errdefs.NotFound error for an unknown sandbox, port or token, an
	// unexposed port or a destroyed sandbox (404); an error wrapping
	// ErrStale when the sandbox restarted or sleeps since the exposure was
	// made (410).
	Lookup(ctx context.Context, sandbox string, port int, token string) (Exposure, DialFunc, error)
}

// ResolverFunc adapts a function to Resolver (handy when the proxy must
// exist before the controller that resolves for it).
type ResolverFunc func(ctx context.Context, sandbox string, port int, token string) (Exposure, DialFunc, error)

// Lookup calls f.
func (f ResolverFunc) Lookup(ctx context.Context, sandbox string, port int, token string) (Exposure, DialFunc, error) {
	return f(ctx, sandbox, port, token)
}

// Config configures the proxy.
type Config struct {
	// PublicHost is the host (and port, if not the scheme's default) that
	// preview host names end in: "localhost:7080" gives
	// http://8080-my-sandbox-<token>.localhost:7080/. Routing compares host
	// names only; the port in a request's Host is ignored.
	PublicHost string
	// Scheme of the public URLs; "http" when empty. It is also what
	// upstream services see in X-Forwarded-Proto (set "https" behind a
	// TLS-terminating front).
	Scheme string
	// APIKey is what private exposures require as a bearer token. An empty
	// key makes every private URL answer 401 (fail closed).
	APIKey string
	// MaxTunnelsPerSandbox caps concurrent upstream connections into one
	// sandbox (each holds a tunnel in its agent); 256 when zero.
	MaxTunnelsPerSandbox int
	// DialTimeout bounds opening one tunnel; 10 s when zero.
	DialTimeout time.Duration
	// Logf logs proxy failures; nil discards.
	Logf func(format string, args ...any)
	// Forward sends a preview of a sandbox another node owns to that
	// node (control/forward); nil: a single host.
	Forward forward.Router
}

func (c Config) scheme() string {
	if c.Scheme == "" {
		return "http"
	}
	return c.Scheme
}

// TokenLen is the length of a preview token (NewToken).
const TokenLen = exposure.TokenLen

// NewToken returns a random token of TokenLen characters from [a-z0-9]
// (about 82 bits), drawn without modulo bias.
func NewToken() string { return exposure.NewToken() }

// Bounds of a caller-chosen token (CheckToken). The lower bound keeps a
// public URL from being guessed; the upper one keeps the host label short.
const (
	MinTokenLen = exposure.MinTokenLen
	MaxTokenLen = exposure.MaxTokenLen
)

// ValidToken reports whether s has the shape of a token: a random one
// (NewToken) or a caller's (CheckToken).
func ValidToken(s string) bool { return CheckToken(s) == nil }

// CheckToken validates a caller-chosen token: MinTokenLen to MaxTokenLen
// characters from [a-z0-9] (a host name label; '-' separates the label's
// parts). Its error, invalid argument, names the rule.
func CheckToken(s string) error { return exposure.CheckToken(s) }

// Label is the {port}-{sandbox}-{token} part of e's URLs.
func Label(e Exposure) string {
	return strconv.Itoa(e.Port) + "-" + e.Sandbox + "-" + e.Token
}

// ParseLabel splits {port}-{sandbox}-{token}. The port is everything
// before the first '-', the token everything after the last, and the
// sandbox (whose name may hold '-') what lies between.
func ParseLabel(label string) (port int, sandbox, token string, err error) {
	bad := func() (int, string, string, error) {
		return 0, "", "", errdefs.NotFound("%q is not a preview URL: want {port}-{sandbox}-{token}", truncate(label, 100))
	}
	first := strings.IndexByte(label, '-')
	last := strings.LastIndexByte(label, '-')
	if first <= 0 || last <= first+1 {
		return bad()
	}
	ps, sandbox, token := label[:first], label[first+1:last], label[last+1:]
	if len(ps) > 5 || ps[0] == '0' || strings.Trim(ps, "0123456789") != "" {
		return bad()
	}
	port, _ = strconv.Atoi(ps)
	if port < 1 || port > 65535 || api.ValidateSandboxName(sandbox) != nil || !ValidToken(token) {
		return bad()
	}
	return port, sandbox, token, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// URL is e's host-routed URL. Browsers and curl resolve *.localhost to
// loopback by themselves; other public hosts need a wildcard DNS record.
// DNS limits a label to 63 bytes, so sandboxes with names over ~40
// characters need PathURL.
func URL(cfg Config, e Exposure) string {
	return cfg.scheme() + "://" + Label(e) + "." + cfg.PublicHost + "/"
}

// PathURL is e's path-form URL under base (the preview or API listener's
// URL, like "http://localhost:7080").
func PathURL(base string, e Exposure) string {
	return strings.TrimRight(base, "/") + PathPrefix + Label(e) + "/"
}

// PathPrefix starts every path-form URL.
const PathPrefix = "/preview/"

// hostOnly drops a port and a trailing dot and lowercases.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// hostLabel returns the first label of host if host is {label}.{PublicHost}.
func (c Config) hostLabel(host string) (string, bool) {
	h, pub := hostOnly(host), hostOnly(c.PublicHost)
	if pub == "" || !strings.HasSuffix(h, "."+pub) {
		return "", false
	}
	label := h[:len(h)-len(pub)-1]
	if label == "" || strings.IndexByte(label, '.') >= 0 {
		return "", false
	}
	return label, true
}

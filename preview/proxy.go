package preview

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Defaults for Config.
const (
	DefaultMaxTunnelsPerSandbox = 256
	DefaultDialTimeout          = 10 * time.Second
	// maxUpstreamHeader bounds the response head a sandbox service can
	// make the proxy read.
	maxUpstreamHeader = 64 << 10
)

// Proxy serves preview URLs. It is an http.Handler for the preview
// listener: host routing, plus the path form on any host name that is not
// a preview label. PathHandler serves only the path form (for mounting
// under another listener, like the API's).
type Proxy struct {
	r       Resolver
	cfg     Config
	keyHash [sha256.Size]byte
	rp      *httputil.ReverseProxy
	tr      *http.Transport

	mu    sync.Mutex
	open  map[target]map[*trackedConn]struct{}
	count map[string]int    // open tunnels by sandbox
	gen   map[target]uint64 // bumped by Revoke; {sandbox, 0} for a whole sandbox
}

// target is one exposed port; port 0 stands for every port of a sandbox.
type target struct {
	sandbox string
	port    int
}

// route is what one request resolved to; it travels in the request's
// context from ServeHTTP to the Transport's dialer.
type route struct {
	exp  Exposure
	dial DialFunc
	// pool keys the Transport's connection pool: idle upstream
	// connections are reused only by requests for the same exposure in the
	// same run, never across tokens or restarts.
	pool       string
	gen, sgen  uint64 // Revoke generations at lookup time
	carriesKey bool   // the request holds berth's API key
	// Path form only: the prefix that was stripped and the rest of the path.
	prefix, path, rawPath string
}

type ctxKey struct{}

// NewProxy returns a Proxy for r.
func NewProxy(r Resolver, cfg Config) *Proxy {
	if cfg.MaxTunnelsPerSandbox <= 0 {
		cfg.MaxTunnelsPerSandbox = DefaultMaxTunnelsPerSandbox
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	p := &Proxy{
		r: r, cfg: cfg,
		open:  map[target]map[*trackedConn]struct{}{},
		count: map[string]int{},
		gen:   map[target]uint64{},
	}
	// Hashing first keeps the comparison constant-time in the key's
	// length too (ConstantTimeCompare returns early on a length mismatch).
	p.keyHash = sha256.Sum256([]byte(cfg.APIKey))
	p.tr = &http.Transport{
		DialContext: p.dial,
		// Proxy is nil: HTTP_PROXY from the daemon's environment must
		// never redirect sandbox traffic.
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        60 * time.Second,
		MaxResponseHeaderBytes: maxUpstreamHeader,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true, // pass encodings through untouched
	}
	var errLog *log.Logger
	if cfg.Logf != nil {
		errLog = log.New(logfWriter(cfg.Logf), "", 0)
	} else {
		errLog = log.New(io.Discard, "", 0)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.tr,
		FlushInterval:  -1, // flush every write: SSE and streams must not wait in a buffer
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.proxyError,
		ErrorLog:       errLog,
	}
	return p
}

// NewHandler returns the host-routed preview handler (see Proxy).
func NewHandler(r Resolver, cfg Config) *Proxy { return NewProxy(r, cfg) }

// PathHandler returns a handler for the path form only, on any host:
// /preview/{port}-{sandbox}-{token}/rest is proxied as /rest with
// X-Forwarded-Prefix set. Mount it ahead of API authentication; it does its
// own (for private exposures).
func PathHandler(r Resolver, cfg Config) http.Handler { return NewProxy(r, cfg).PathHandler() }

// PathHandler is the path-form view of p; it shares p's tunnels, so Revoke
// covers both.
func (p *Proxy) PathHandler() http.Handler { return http.HandlerFunc(p.servePath) }

// NewServer wraps h in an http.Server with the limits a public listener
// needs: a header deadline against slowloris and a header size cap. There
// is no read or write timeout: previews stream (SSE, WebSockets, uploads).
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
	}
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Forwarding headers are trusted only on the node listener (and are
	// nothing a sandbox's server should see).
	forward.StripHeaders(r.Header)
	if label, ok := p.cfg.hostLabel(r.Host); ok {
		p.serve(w, r, label, nil)
		return
	}
	// Any other host name (the bare public host, an IP address) gets the
	// path form: it is for clients that cannot use wildcard names.
	if strings.HasPrefix(r.URL.Path, PathPrefix) {
		p.servePath(w, r)
		return
	}
	p.fail(w, errdefs.NotFound("no preview URL at host %q", truncate(r.Host, 100)))
}

func (p *Proxy) servePath(w http.ResponseWriter, r *http.Request) {
	ep := r.URL.EscapedPath()
	if !strings.HasPrefix(ep, PathPrefix) {
		p.fail(w, errdefs.NotFound("no preview URL at %q", truncate(ep, 100)))
		return
	}
	label, tail, hasSlash := strings.Cut(ep[len(PathPrefix):], "/")
	rawPath := "/" + tail
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		p.fail(w, errdefs.InvalidArgument("bad escape in path: %w", err))
		return
	}
	pr := &route{prefix: PathPrefix + label, path: path, rawPath: rawPath}
	if !hasSlash {
		pr.path = "" // redirect to the canonical form once the URL checks out
	}
	p.serve(w, r, label, pr)
}

// serve resolves label and proxies r. pathForm is nil for host routing.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, label string, pathForm *route) {
	port, sandbox, token, err := ParseLabel(label)
	if err != nil {
		p.fail(w, err)
		return
	}
	if p.cfg.Forward != nil {
		// The owner checks the token and proxies; berth's key, if the
		// caller sent it, is checked here and stays here (the owner
		// learns only that it was presented); any other Authorization
		// is the app's and travels.
		key := p.carriesKey(r)
		out, err := p.cfg.Forward.Sandbox(w, r, sandbox, forward.Route{Face: forward.Preview, KeepAuthorization: !key, KeyVerified: key})
		if err != nil {
			p.fail(w, err)
			return
		}
		if out == forward.Proxied {
			return
		}
	}
	exp, dial, err := p.r.Lookup(r.Context(), sandbox, port, token)
	if err != nil {
		p.fail(w, err)
		return
	}
	// Defence in depth against a Resolver bug: the answer must be for
	// exactly what was asked, token included (compared in constant time).
	if exp.Sandbox != sandbox || exp.Port != port || dial == nil ||
		subtle.ConstantTimeCompare([]byte(exp.Token), []byte(token)) != 1 {
		p.fail(w, errdefs.NotFound("no preview URL %q", label))
		return
	}
	carriesKey := p.carriesKey(r)
	if exp.Private && !carriesKey {
		w.Header().Set("WWW-Authenticate", `Bearer realm="berth-preview"`)
		p.fail(w, errdefs.Unauthenticated("this preview URL is private: send \"Authorization: Bearer <berth API key>\""))
		return
	}
	rt := &route{exp: exp, dial: dial, carriesKey: carriesKey, pool: poolHost(exp)}
	if pathForm != nil {
		if pathForm.path == "" {
			// /preview/{label} → /preview/{label}/, so that relative links
			// in the page resolve under the prefix.
			loc := pathForm.prefix + "/"
			if r.URL.RawQuery != "" {
				loc += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, loc, http.StatusPermanentRedirect)
			return
		}
		rt.prefix, rt.path, rt.rawPath = pathForm.prefix, pathForm.path, pathForm.rawPath
	}
	p.mu.Lock()
	rt.gen, rt.sgen = p.gen[target{sandbox, port}], p.gen[target{sandbox, 0}]
	p.mu.Unlock()
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, rt)))
}

func poolHost(e Exposure) string {
	sum := sha256.Sum256([]byte(e.Sandbox + "\x00" + strconv.Itoa(e.Port) + "\x00" + e.Token + "\x00" + e.RunID))
	return "x" + hex.EncodeToString(sum[:16]) + ".invalid"
}

// carriesKey reports whether r holds berth's API key as a bearer token.
func (p *Proxy) carriesKey(r *http.Request) bool {
	if id, ok := forward.From(r.Context()); ok && id.KeyVerified {
		return true // the entry node checked it (the key stayed there)
	}
	if p.cfg.APIKey == "" {
		return false
	}
	auth := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], p.keyHash[:]) == 1
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(ctxKey{}).(*route)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = rt.pool
	// Out.Host stays the public host the client asked for, which is also
	// what X-Forwarded-Host says.
	pr.SetXForwarded() // replaces any client-sent X-Forwarded-For/Host/Proto
	if p.cfg.Scheme != "" {
		pr.Out.Header.Set("X-Forwarded-Proto", p.cfg.Scheme)
	}
	pr.Out.Header.Del("X-Forwarded-Prefix") // never trust the client's
	if rt.prefix != "" {
		pr.Out.URL.Path, pr.Out.URL.RawPath = rt.path, rt.rawPath
		pr.Out.Header.Set("X-Forwarded-Prefix", rt.prefix)
	}
	// berth's API key must never reach sandbox code: with it the sandbox
	// could drive the whole daemon. In private mode the header was ours;
	// in public mode it is dropped only if it is berth's key (a public
	// app's own Authorization, like Basic auth, passes).
	if rt.exp.Private || rt.carriesKey {
		pr.Out.Header.Del("Authorization")
	}
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	rt, _ := resp.Request.Context().Value(ctxKey{}).(*route)
	if rt == nil {
		return nil
	}
	if cookies := resp.Header.Values("Set-Cookie"); len(cookies) > 0 {
		resp.Header.Del("Set-Cookie")
		for _, c := range cookies {
			resp.Header.Add("Set-Cookie", confineCookie(c, rt.prefix))
		}
	}
	// In the path form the service thinks it lives at /; keep its
	// absolute-path redirects under the prefix.
	if rt.prefix != "" {
		if loc := resp.Header.Get("Location"); strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, "//") {
			resp.Header.Set("Location", rt.prefix+loc)
		}
	}
	return nil
}

// confineCookie keeps a sandbox's cookie to its own preview. A Domain
// attribute is dropped, making the cookie host-only: otherwise a service
// at 8080-a-<token>.preview.example.com could set (or overwrite) cookies for
// every other sandbox's previews under preview.example.com (cookie
// tossing; the reason hosting domains join the Public Suffix List). In the
// path form, where all previews share one origin, a Path is moved under
// the preview's prefix (a missing Path already defaults to a directory
// under it).
func confineCookie(c, prefix string) string {
	parts := strings.Split(c, ";")
	out := parts[:1]
	for _, a := range parts[1:] {
		name, val, _ := strings.Cut(strings.TrimSpace(a), "=")
		switch {
		case strings.EqualFold(name, "domain"):
			continue
		case strings.EqualFold(name, "path") && prefix != "":
			if !strings.HasPrefix(val, "/") {
				val = "/"
			}
			a = " Path=" + prefix + val
		}
		out = append(out, a)
	}
	return strings.Join(out, ";")
}

// proxyError answers when the upstream could not be reached or failed
// before sending a response head.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client left; nobody to answer
	}
	rt, _ := r.Context().Value(ctxKey{}).(*route)
	what := "the preview target"
	if rt != nil {
		what = fmt.Sprintf("port %d in sandbox %q", rt.exp.Port, rt.exp.Sandbox)
	}
	var ne net.Error
	var kind *errdefs.Error
	switch {
	case errdefs.IsKind(err, errdefs.ErrResourceExhausted):
		p.write(w, http.StatusServiceUnavailable, "resource_exhausted", err.Error())
	case errdefs.IsKind(err, errdefs.ErrDeadlineExceeded),
		// Only an error without a kind is judged by its cause: the agent's
		// "did not answer in time" is unavailable, in its own words below.
		errdefs.Kind(err) == nil && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()):
		p.write(w, http.StatusGatewayTimeout, "deadline_exceeded", fmt.Sprintf("%s did not answer in time", what))
	case errors.As(err, &kind):
		// The agent's own words, e.g. "nothing is listening on port 8080
		// in the sandbox".
		p.write(w, http.StatusBadGateway, errdefs.Code(err), err.Error())
	default:
		if p.cfg.Logf != nil {
			p.cfg.Logf("preview: %s: %v", what, err)
		}
		p.write(w, http.StatusBadGateway, "unavailable", fmt.Sprintf("%s failed: %v", what, err))
	}
}

// fail answers a request that was not proxied.
func (p *Proxy) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrStale) {
		p.write(w, http.StatusGone, "stale_preview_url", err.Error()+"; expose the port again for a new URL")
		return
	}
	p.write(w, api.HTTPStatus(err), errdefs.Code(err), err.Error())
}

func (p *Proxy) write(w http.ResponseWriter, status int, code, msg string) {
	data, _ := json.Marshal(api.Error{Code: code, Message: msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store") // a 404/410 must not outlive a re-expose
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

type logfWriter func(format string, args ...any)

func (f logfWriter) Write(b []byte) (int, error) {
	f("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

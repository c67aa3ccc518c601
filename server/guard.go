package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/reqinfo"
	"github.com/berth-sh/berth/policy"
)

// Defaults for GuardOptions.
const (
	DefaultBodyTimeout = 30 * time.Second
	DefaultStreamIdle  = 2 * time.Minute
	// drainTimeout is how long an error answer waits for the rest of a
	// body the handler did not read (so that a client that sent it gets
	// the answer, not a reset) before the connection is closed.
	drainTimeout = time.Second
)

// GuardOptions configure Guard.
type GuardOptions struct {
	// Logger receives one line per request (see Guard); nil: none.
	Logger *slog.Logger
	// BodyTimeout bounds the time to read a whole request body of a
	// bounded route (the native JSON API); default 30 s.
	BodyTimeout time.Duration
	// StreamIdle bounds each pause in the body of a long-lived route
	// (uploads, the E2B face's streams): every read must make progress
	// within it; default 2 min.
	StreamIdle time.Duration
	// LongLived reports a request whose body may legitimately take long
	// (default LongLivedBody).
	LongLived func(r *http.Request) bool
	// Passthrough reports a request that is proxied to a sandbox's own
	// server as it is (its path is the user's and not checked here); nil:
	// none.
	Passthrough func(r *http.Request) bool
	// Tenant names the caller's tenant for the log line when the handler
	// did not record one (the E2B face); nil: none.
	Tenant func(r *http.Request) string
	// Weak switches the body-read protections off (the adversarial
	// suite's negative control, weaken.HTTPGuard). Request ids and logs
	// stay.
	Weak bool
	// KeepForwardHeaders leaves the forwarding headers in (the node
	// listener: the forwarding receiver behind it checks the cluster
	// credential before it reads them). Every user-facing listener drops
	// them.
	KeepForwardHeaders bool
	// Observe, when set, receives every request's route label, status
	// and duration when it ends (package metrics). The route is the
	// pattern that served it, never the raw path (see RouteLabel).
	Observe func(route string, status int, d time.Duration)
}

// RouteLabel is a request's route for a metric: the native API's route
// pattern when one served it, else a fixed name of the face ("e2b",
// "app", "console", "unrouted"), so that sandbox names and ids in paths
// never become label values.
func RouteLabel(r *http.Request, route string, passthrough bool) string {
	switch {
	case route != "":
		return route
	case passthrough:
		return "app"
	case strings.HasPrefix(r.URL.Path, "/v1/"):
		return "unrouted"
	case r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/console"):
		return "console"
	}
	return "e2b"
}

// LongLivedBody is the default GuardOptions.LongLived: the native API's
// uploads (file content, image import, a build's context) and everything outside /v1 (the E2B
// face's file uploads and Connect streams, the console), which get the idle
// bound instead of the whole-body one.
func LongLivedBody(r *http.Request) bool {
	p := r.URL.Path
	if !strings.HasPrefix(p, "/v1/") {
		return true
	}
	switch {
	case r.Method == http.MethodPut && strings.HasPrefix(p, "/v1/sandboxes/") && strings.HasSuffix(p, "/files/content"):
		return true
	case r.Method == http.MethodPost && (p == "/v1/images/import" || p == "/v1/images/builds"):
		return true
	}
	return false
}

// Guard wraps the daemon's whole HTTP surface (both API faces and the
// console). For every request it:
//
//   - adopts a sane incoming X-Request-Id or makes one, returns it in the
//     X-Request-Id response header (the error writers of both faces copy it
//     into their bodies) and logs one line when the request ends: method,
//     route pattern, status, duration, sandbox, tenant, request id and
//     remote address. It logs no query string, header or body, so no token
//     or key reaches the log;
//   - drops every forwarding header (control/forward): they are trusted
//     only from the node listener, never from a user;
//   - refuses a non-canonical path (".", ".." or empty segments) with 400
//     instead of letting a ServeMux redirect it: a followed redirect of a
//     DELETE to the cleaned path once destroyed a sandbox;
//   - bounds how long an HTTP/1 request body may take (BodyTimeout for the
//     whole body, StreamIdle per pause for long-lived routes);
//   - closes the connection after an error answer whose body was not read,
//     waiting at most a second for it, so that an unauthenticated POST that
//     announces a body and never sends it is answered 401 and closed at
//     once instead of holding a connection (and an fd) forever.
func Guard(next http.Handler, o GuardOptions) http.Handler {
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.StreamIdle <= 0 {
		o.StreamIdle = DefaultStreamIdle
	}
	if o.LongLived == nil {
		o.LongLived = LongLivedBody
	}
	return &guard{next: next, o: o}
}

type guard struct {
	next http.Handler
	o    GuardOptions

	// Lines for 401 answers are rate-limited: they are the one kind
	// anyone who reaches the listener can make without a key, and the
	// log must not become a disk-filling channel.
	unauthMu         sync.Mutex
	unauthWindow     time.Time
	unauthN          int
	unauthSuppressed int
}

// unauthLinesPerSecond bounds the log lines of 401 answers.
const unauthLinesPerSecond = 20

// admitUnauthLine reports whether a 401 may be logged now, and how many
// were left out since the last one that was.
func (g *guard) admitUnauthLine(now time.Time) (bool, int) {
	g.unauthMu.Lock()
	defer g.unauthMu.Unlock()
	if now.Sub(g.unauthWindow) >= time.Second {
		g.unauthWindow, g.unauthN = now, 0
	}
	if g.unauthN >= unauthLinesPerSecond {
		g.unauthSuppressed++
		return false, 0
	}
	g.unauthN++
	n := g.unauthSuppressed
	g.unauthSuppressed = 0
	return true, n
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	// Forwarding headers mean something only on the node listener; from
	// a user they are dropped here (control/forward.StripHeaders).
	if !g.o.KeepForwardHeaders {
		forward.StripHeaders(r.Header)
	}
	id := r.Header.Get(reqinfo.Header)
	if !reqinfo.ValidID(id) {
		id = reqinfo.NewID()
	}
	w.Header().Set(reqinfo.Header, id)
	info := &reqinfo.Info{ID: id}
	r = r.WithContext(reqinfo.With(r.Context(), info)) // a copy: the server keeps its own Body
	gw := &guardWriter{ResponseWriter: w, rc: http.NewResponseController(w), http1: r.ProtoMajor == 1}
	unread := r.Body // what drainUnread reads after an error answer
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		gw.bodyDone = true
	} else if gw.http1 && !g.o.Weak {
		// HTTP/2 streams share one connection (and one fd), so only
		// HTTP/1 bodies are bounded here.
		b := &guardBody{rc: r.Body, w: gw}
		if g.o.LongLived(r) {
			b.idle = g.o.StreamIdle
		} else {
			b.limit = g.o.BodyTimeout
			_ = gw.rc.SetReadDeadline(t0.Add(g.o.BodyTimeout))
		}
		r.Body = b
	}
	gw.weak = g.o.Weak
	defer func() {
		g.log(r, gw, info, t0)
		g.observe(r, gw, info, t0)
	}()
	if g.o.Passthrough == nil || !g.o.Passthrough(r) {
		if msg := nonCanonical(r); msg != "" {
			writeJSON(gw, http.StatusBadRequest, api.Error{Code: "invalid_argument", Message: msg, RequestID: id})
			return
		}
	}
	g.next.ServeHTTP(gw, r)
	// A client waiting for "100 Continue" has not sent the body and
	// will not: the answer is all it needs, so nothing is drained.
	if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		gw.drainUnread(unread)
	}
}

// maxDrain bounds what drainUnread reads of a body after an error answer.
const maxDrain = 64 << 20

// drainUnread reads and discards what the client still sends of a body
// the handler answered with an error before reading it all, for at most
// drainTimeout (the read deadline WriteHeader set) and maxDrain bytes,
// after flushing the answer. net/http itself discards only 256 KiB before
// it closes such a connection, and a client still writing a larger body
// then gets a reset instead of the answer: the E2B SDK's 8 MiB upload into
// a full disk saw "fetch failed: ECONNRESET", not its 507.
func (w *guardWriter) drainUnread(body io.Reader) {
	w.mu.Lock()
	drain := w.status >= 400 && !w.bodyDone && w.http1 && !w.weak
	w.mu.Unlock()
	if !drain || body == nil {
		return
	}
	_ = w.rc.Flush()
	_, _ = io.CopyN(io.Discard, body, maxDrain)
}

func (g *guard) observe(r *http.Request, gw *guardWriter, info *reqinfo.Info, t0 time.Time) {
	if g.o.Observe == nil {
		return
	}
	route, _, _ := info.Fields()
	status := gw.status
	if status == 0 {
		status = http.StatusOK
	}
	g.o.Observe(RouteLabel(r, route, g.o.Passthrough != nil && g.o.Passthrough(r)), status, time.Since(t0))
}

func (g *guard) log(r *http.Request, gw *guardWriter, info *reqinfo.Info, t0 time.Time) {
	if g.o.Logger == nil {
		return
	}
	route, sandbox, tenant := info.Fields()
	if route == "" && g.o.Passthrough != nil && g.o.Passthrough(r) {
		route = "(app in sandbox)" // the user's own paths are not logged
		sandbox = e2bSandbox(r)
	}
	if route == "" {
		route = r.URL.Path // the E2B face and the console: paths carry no secrets (queries are never logged)
		if sandbox == "" {
			sandbox = e2bSandbox(r)
		}
	}
	if tenant == "" {
		tenant = policy.TenantFrom(r.Context())
	}
	if tenant == "" && g.o.Tenant != nil {
		tenant = g.o.Tenant(r)
	}
	status := gw.status
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	var extra []slog.Attr
	if status == http.StatusUnauthorized {
		ok, suppressed := g.admitUnauthLine(time.Now())
		if !ok {
			return
		}
		if suppressed > 0 {
			extra = append(extra, slog.Int("suppressed_401_lines", suppressed))
		}
	}
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelError
	case status >= 400:
		level = slog.LevelWarn
	}
	g.o.Logger.LogAttrs(context.Background(), level, "request", append([]slog.Attr{
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.Int("status", status),
		slog.Duration("duration", time.Since(t0)),
		slog.String("sandbox", sandbox),
		slog.String("tenant", tenant),
		slog.String("request_id", info.ID),
		slog.String("remote", remoteHost(r.RemoteAddr)),
	}, extra...)...)
}

// e2bSandbox is the sandbox an E2B-face request names, for the log: the
// data plane's routing header, or the id in a control-plane path.
func e2bSandbox(r *http.Request) string {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" && reqinfo.ValidID(id) {
		return id
	}
	if label, _, ok := strings.Cut(r.Host, "."); ok {
		if _, id, ok := strings.Cut(label, "-"); ok && len(id) == 20 && reqinfo.ValidID(id) {
			return id // <port>-<id>.<domain>
		}
	}
	p := strings.TrimPrefix(r.URL.Path, "/v2")
	if rest, ok := strings.CutPrefix(p, "/sandboxes/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		if reqinfo.ValidID(id) {
			return id
		}
	}
	return ""
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// nonCanonical names what is wrong with a path that a ServeMux would
// redirect to its cleaned form, or returns "". The mux cleans the escaped
// path, so that is what is checked: an escaped dot ("%2e%2e") is not a
// segment to the mux, reaches the route as an id and is refused by the
// id's own validation ("." and ".." are no valid id anywhere).
func nonCanonical(r *http.Request) string {
	p := r.URL.EscapedPath()
	if r.Method == http.MethodConnect || p == "" || p == "*" {
		return ""
	}
	if p[0] != '/' {
		return fmt.Sprintf("request path %q must start with /", p)
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "." || s == "..":
			return fmt.Sprintf("request path %q has a %q segment: berth does not resolve or redirect dot segments; name the resource directly (\".\" and \"..\" are never valid ids)", p, s)
		case s == "" && i < len(segs)-1:
			return fmt.Sprintf("request path %q has an empty segment (//): berth does not clean or redirect paths; send the path without it", p)
		}
	}
	return ""
}

// guardWriter records the status for the log and closes the connection
// after an error answer to a request whose body is unread.
type guardWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	http1    bool
	weak     bool
	mu       sync.Mutex
	bodyDone bool
	status   int
}

func (w *guardWriter) WriteHeader(code int) {
	w.mu.Lock()
	if w.status == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		w.status = code
	}
	unread := !w.bodyDone
	w.mu.Unlock()
	if code >= 400 && unread && w.http1 && !w.weak {
		// net/http would otherwise read up to 256 KiB of the unread body
		// before it sends this answer, for as long as the client takes.
		w.Header().Set("Connection", "close")
		_ = w.rc.SetReadDeadline(time.Now().Add(drainTimeout))
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *guardWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.status == 0 {
		w.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	} else {
		w.mu.Unlock()
	}
	return w.ResponseWriter.Write(p)
}

func (w *guardWriter) markBodyDone() {
	w.mu.Lock()
	w.bodyDone = true
	w.mu.Unlock()
}

// Flush and Hijack are here as methods (not only through Unwrap) because
// some libraries type-assert them (connect-go needs an http.Flusher).
func (w *guardWriter) Flush() { _ = w.rc.Flush() }

func (w *guardWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.rc.Hijack()
	if err == nil {
		w.mu.Lock()
		if w.status == 0 {
			w.status = http.StatusSwitchingProtocols
		}
		w.mu.Unlock()
	}
	return c, brw, err
}

func (w *guardWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// guardBody bounds the reading of an HTTP/1 body: by a deadline for the
// whole body, or (idle > 0) by a deadline renewed before every read. At
// EOF the deadline is lifted, so that net/http's background read, which
// notices a client going away during a long answer, does not time out.
type guardBody struct {
	rc    io.ReadCloser
	w     *guardWriter
	limit time.Duration // whole-body bound
	idle  time.Duration // per-read bound (long-lived routes)
	done  bool
	// closed is set by Close. The server's body itself is left open so
	// the guard can still drain it after an error answer (drainUnread):
	// an HTTP client that forwards the body (to the agent) closes it as
	// soon as its answer comes, and closing net/http's body discards only
	// 256 KiB before the connection is reset under a client still sending.
	// net/http closes its body itself once the handler returns.
	closed atomic.Bool
}

var errBodyClosed = errors.New("http: read on closed request body")

func (b *guardBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	if b.idle > 0 && !b.done {
		_ = b.w.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.rc.Read(p)
	if err != nil && !b.done {
		b.done = true
		if errors.Is(err, io.EOF) {
			b.w.markBodyDone()
			_ = b.w.rc.SetReadDeadline(time.Time{})
		} else if isTimeout(err) {
			if b.idle > 0 {
				err = fmt.Errorf("request body stalled for more than %s: %w", b.idle, err)
			} else {
				err = fmt.Errorf("request body was not received within %s: %w", b.limit, err)
			}
		}
	}
	return n, err
}

func (b *guardBody) Close() error {
	b.closed.Store(true)
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

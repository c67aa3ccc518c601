package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/reqinfo"
	"github.com/berth-sh/berth/policy"
)

// Defaults for Options.
const (
	DefaultMaxBodyBytes      = 1 << 20  // JSON request bodies
	DefaultMaxBufferedOutput = 16 << 20 // per stream of a buffered exec
)

// Options configure New.
type Options struct {
	// APIKey is the bearer token every route but health requires. An empty
	// key does not disable auth: it makes every authenticated route answer
	// 401, so a daemon that failed to load its key fails closed.
	APIKey string
	// MaxBodyBytes caps JSON request bodies (default 1 MiB). File and image
	// uploads are streams and are not capped here.
	MaxBodyBytes int64
	// MaxBufferedOutput caps stdout and stderr each of a buffered exec
	// (default 16 MiB); beyond it output is dropped and Truncated is set.
	MaxBufferedOutput int64
	// NodeName is this member's name, reported by GET /v1/health.
	NodeName string
	// Version is reported by GET /v1/health.
	Version string
	// Logf logs server-side failures (5xx, panics). Nil discards.
	Logf func(format string, args ...any)
	// Objects serves durable-object RPC (/v1/objects); nil: none.
	Objects control.Objects
	// Tenants resolves API keys other than APIKey to a tenant of the
	// operator policy (the tenant goes into the request's context, see
	// policy.WithTenant); nil: APIKey is the only key.
	Tenants func(key string) (tenant string, ok bool)
	// Journal records mutating calls and replays Idempotency-Key
	// retries (journal.go); nil: calls are not recorded.
	Journal Journal
	// Nodes is the cluster membership (/v1/nodes, operator only);
	// nil: those routes answer 412.
	Nodes control.Nodes
	// Forward sends requests for sandboxes another node owns to that
	// node, and creates to the node placement chose (control/forward,
	// forward.go); nil: a single host, everything is served here.
	Forward forward.Router
	// Pools reports this node's warm pools (GET /v1/pools, operator
	// only); nil: none.
	Pools func() []api.Pool
	// Builds runs Dockerfile builds (POST /v1/images/builds); nil: that
	// route answers 412.
	Builds control.ImageBuilds
	// Pushes pushes images to registries (POST /v1/images/push, operator
	// only); nil: that route answers 412.
	Pushes control.ImagePushes
	// Usage serves per-sandbox metrics and tenant usage records
	// (usage.go); nil: those routes answer failed_precondition.
	Usage Usage
	// Volumes serves /v1/volumes (volumes.go); nil: those routes answer
	// 409 (failed precondition).
	Volumes Volumes
	// Events is the lifecycle event feed (GET /v1/events, events.go);
	// nil: that route answers 409 (failed precondition).
	Events Events
}

type handlerFunc func(s *server, w http.ResponseWriter, r *http.Request) error

type route struct {
	method, path string
	h            handlerFunc
}

const healthPattern = "GET /v1/health"

// routes is the whole API. A test checks it against api/openapi.yaml.
var routes = []route{
	{"GET", "/v1/health", (*server).health},
	{"POST", "/v1/sandboxes", (*server).createSandbox},
	{"GET", "/v1/sandboxes", (*server).listSandboxes},
	{"PUT", "/v1/sandboxes/{name}", (*server).getOrCreateSandbox},
	{"GET", "/v1/sandboxes/{name}", (*server).getSandbox},
	{"DELETE", "/v1/sandboxes/{name}", (*server).destroySandbox},
	{"POST", "/v1/sandboxes/{name}/sleep", (*server).sleepSandbox},
	{"POST", "/v1/sandboxes/{name}/exec", (*server).exec},
	{"GET", "/v1/sandboxes/{name}/files/content", (*server).readFile},
	{"PUT", "/v1/sandboxes/{name}/files/content", (*server).writeFile},
	{"GET", "/v1/sandboxes/{name}/files", (*server).listFiles},
	{"DELETE", "/v1/sandboxes/{name}/files", (*server).removeFile},
	{"GET", "/v1/sandboxes/{name}/files/stat", (*server).statFile},
	{"GET", "/v1/sandboxes/{name}/files/exists", (*server).fileExists},
	{"POST", "/v1/sandboxes/{name}/files/mkdir", (*server).mkdir},
	{"POST", "/v1/sandboxes/{name}/files/rename", (*server).rename},
	{"GET", "/v1/images", (*server).listImages},
	{"POST", "/v1/images/pull", (*server).pullImage},
	{"POST", "/v1/images/push", (*server).pushImage},
	{"POST", "/v1/images/import", (*server).importImage},
	{"POST", "/v1/images/build-base", (*server).buildBase},
	{"POST", "/v1/images/builds", (*server).buildImage},
	{"DELETE", "/v1/images/{ref...}", (*server).removeImage},
	{"POST", "/v1/sandboxes/{name}/snapshots", (*server).createSnapshot},
	{"GET", "/v1/snapshots", (*server).listSnapshots},
	{"GET", "/v1/snapshots/{id}", (*server).getSnapshot},
	{"DELETE", "/v1/snapshots/{id}", (*server).deleteSnapshot},
	{"POST", "/v1/sandboxes/{name}/fork", (*server).fork},
	{"POST", "/v1/sandboxes/{name}/backups", (*server).createBackup},
	{"GET", "/v1/backups", (*server).listBackups},
	{"DELETE", "/v1/backups/{id}", (*server).deleteBackup},
	{"POST", "/v1/backups/{id}/restore", (*server).restoreBackup},
	{"POST", "/v1/sandboxes/{name}/ports", (*server).exposePort},
	{"GET", "/v1/sandboxes/{name}/ports", (*server).listPorts},
	{"DELETE", "/v1/sandboxes/{name}/ports/{port}", (*server).unexposePort},
	// Dev loop: processes.go, sessions.go, terminals.go, watch.go.
	{"POST", "/v1/sandboxes/{name}/processes", (*server).startProcess},
	{"GET", "/v1/sandboxes/{name}/processes", (*server).listProcesses},
	{"DELETE", "/v1/sandboxes/{name}/processes", (*server).killAllProcesses},
	{"GET", "/v1/sandboxes/{name}/processes/{id}", (*server).getProcess},
	{"DELETE", "/v1/sandboxes/{name}/processes/{id}", (*server).killProcess},
	{"GET", "/v1/sandboxes/{name}/processes/{id}/logs", (*server).processLogs},
	{"POST", "/v1/sandboxes/{name}/processes/{id}/wait-log", (*server).waitLog},
	{"POST", "/v1/sandboxes/{name}/processes/{id}/wait-port", (*server).waitPort},
	{"POST", "/v1/sandboxes/{name}/processes/{id}/wait-exit", (*server).waitExit},
	{"POST", "/v1/sandboxes/{name}/sessions", (*server).createSession},
	{"GET", "/v1/sandboxes/{name}/sessions", (*server).listSessions},
	{"GET", "/v1/sandboxes/{name}/sessions/{id}", (*server).getSession},
	{"DELETE", "/v1/sandboxes/{name}/sessions/{id}", (*server).deleteSession},
	{"PATCH", "/v1/sandboxes/{name}/sessions/{id}", (*server).updateSession},
	{"POST", "/v1/sandboxes/{name}/sessions/{id}/exec", (*server).sessionExec},
	{"POST", "/v1/sandboxes/{name}/git/checkout", (*server).gitCheckout},
	{"POST", "/v1/sandboxes/{name}/terminals", (*server).createTerminal},
	{"GET", "/v1/sandboxes/{name}/terminals", (*server).listTerminals},
	{"DELETE", "/v1/sandboxes/{name}/terminals/{id}", (*server).deleteTerminal},
	{"GET", "/v1/sandboxes/{name}/terminals/{id}/ws", (*server).terminalWS},
	{"GET", "/v1/sandboxes/{name}/watch", (*server).watch},
	// Code contexts: interp.go.
	{"POST", "/v1/sandboxes/{name}/code/contexts", (*server).createCodeContext},
	{"GET", "/v1/sandboxes/{name}/code/contexts", (*server).listCodeContexts},
	{"DELETE", "/v1/sandboxes/{name}/code/contexts/{id}", (*server).deleteCodeContext},
	{"POST", "/v1/sandboxes/{name}/code/contexts/{id}/restart", (*server).restartCodeContext},
	{"POST", "/v1/sandboxes/{name}/code/run", (*server).runCode},
	// Egress: egress.go.
	{"GET", "/v1/sandboxes/{name}/network", (*server).getNetwork},
	{"PUT", "/v1/sandboxes/{name}/network", (*server).setNetwork},
	{"GET", "/v1/sandboxes/{name}/egress/log", (*server).egressLog},
	{"GET", "/v1/secrets", (*server).listSecrets},
	{"PUT", "/v1/secrets/{secret}", (*server).setSecret},
	{"DELETE", "/v1/secrets/{secret}", (*server).deleteSecret},
	// Durable objects and the journal: objects.go, journal.go.
	{"POST", "/v1/objects/{class}/{id}/{method}", (*server).callObject},
	{"GET", "/v1/sandboxes/{name}/journal", (*server).getJournal},
	{"GET", "/v1/objects/{class}/{id}/journal", (*server).getObjectJournal},
	// Cluster membership: nodes.go.
	{"GET", "/v1/pools", (*server).listPools},
	{"GET", "/v1/nodes", (*server).listNodes},
	// Usage and metering: usage.go.
	{"GET", "/v1/sandboxes/{name}/metrics", (*server).sandboxMetrics},
	{"GET", "/v1/usage", (*server).usage},
	// Lifecycle events: events.go.
	{"GET", "/v1/events", (*server).streamEvents},
	{"GET", "/v1/nodes/{node}", (*server).getNode},
	{"POST", "/v1/nodes/{node}/drain", (*server).drainNode},
	{"POST", "/v1/nodes/{node}/undrain", (*server).undrainNode},
	// Volumes: volumes.go.
	{"POST", "/v1/volumes", (*server).createVolume},
	{"GET", "/v1/volumes", (*server).listVolumes},
	{"GET", "/v1/volumes/{volume}", (*server).getVolume},
	{"DELETE", "/v1/volumes/{volume}", (*server).deleteVolume},
	{"POST", "/v1/volumes/{volume}/snapshot", (*server).snapshotVolume},
	{"POST", "/v1/volumes/{volume}/fork", (*server).forkVolume},
}

type server struct {
	b            control.Backend
	opts         Options
	mux          *http.ServeMux
	keyHash      [sha256.Size]byte
	hasKey       bool
	pingInterval time.Duration
	eventPoll    time.Duration // GET /v1/events' journal poll; 0 is defaultEventPoll
}

// New returns the API handler. Wrap it in NewHTTPServer (or an equivalent
// http.Server with header timeouts) before listening.
func New(b control.Backend, opts Options) http.Handler { return newServer(b, opts) }

func newServer(b control.Backend, opts Options) *server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxBufferedOutput <= 0 {
		opts.MaxBufferedOutput = DefaultMaxBufferedOutput
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	s := &server{b: b, opts: opts, mux: http.NewServeMux(), pingInterval: 5 * time.Second}
	if opts.APIKey != "" {
		// Comparing fixed-size hashes keeps the comparison constant-time
		// in the key's length too (ConstantTimeCompare returns early on
		// a length mismatch).
		s.keyHash = sha256.Sum256([]byte(opts.APIKey))
		s.hasKey = true
	}
	for _, rt := range routes {
		h := rt.h
		pattern := rt.method + " " + rt.path
		if rule, ok := keyRules[pattern]; ok {
			h = withKeyRule(pattern, rule, opts.Journal != nil, h)
		}
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if rw, ok := w.(*routeWriter); ok {
				rw.routed = true
				w = rw.ResponseWriter
			}
			info := reqinfo.From(r.Context())
			info.SetRoute(pattern, r.PathValue("name"))
			info.SetTenant(policy.TenantFrom(r.Context()))
			// A single host has no router: this one branch is all the
			// forwarding costs it (BenchmarkExecSingleHost).
			if s.opts.Forward != nil && s.forward(w, r, pattern) {
				return
			}
			s.serve(w, r, h)
		})
	}
	return s
}

// NewHTTPServer wraps h in an http.Server with the timeouts an API exposed to
// untrusted clients needs: a header deadline against slowloris, a header size
// cap and an idle timeout. There is deliberately no ReadTimeout/WriteTimeout:
// uploads and exec streams are legitimately long; stalled stream writes are
// bounded per write instead (see sseStream).
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
	}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	// ?access_token= is stripped from r here whatever the route, and
	// honoured only where a browser cannot send a header (token.go).
	tokenOK := s.tokenAuthorized(r, pattern)
	// Authenticate before routing answers 404 or 405, so that an
	// unauthenticated caller cannot enumerate the API.
	authOK := s.authorized(r)
	if id, ok := forward.From(r.Context()); ok {
		// Forwarded by another node, which authenticated the caller (the
		// key stayed there); only the node listener's Receiver, after the
		// cluster credential checked out, can put this in the context.
		authOK = true
		if id.Tenant != "" {
			r = r.WithContext(policy.WithTenant(r.Context(), id.Tenant))
		}
	}
	if !authOK && s.opts.Tenants != nil {
		if tenant, ok := s.opts.Tenants(bearerToken(r)); ok && tenant != "" {
			r = r.WithContext(policy.WithTenant(r.Context(), tenant))
			authOK = true
		}
	}
	if pattern != healthPattern && !authOK && !tokenOK {
		w.Header().Set("WWW-Authenticate", `Bearer realm="berth"`)
		writeError(w, errdefs.Unauthenticated("missing or invalid API key: send \"Authorization: Bearer <key>\" (the key is in <data>/client.json)"))
		return
	}
	// The API never redirects: a non-canonical path is refused before
	// routing (a ServeMux would answer it with a redirect to the cleaned
	// path, and a client that follows a redirected DELETE of
	// …/processes/.. deletes the sandbox).
	if msg := nonCanonical(r); msg != "" {
		writeError(w, errdefs.InvalidArgument("%s", msg))
		return
	}
	if pattern == "" {
		// The mux answers unknown routes itself in plain text. Ask it
		// what it would say and answer in JSON instead.
		rec := &captureWriter{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeJSON(w, http.StatusMethodNotAllowed, api.Error{
				Code:      "invalid_argument",
				Message:   fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, rec.header.Get("Allow")),
				RequestID: w.Header().Get(reqinfo.Header),
			})
			return
		}
		writeError(w, errdefs.NotFound("no API route %s %s", r.Method, r.URL.Path))
		return
	}
	// Whatever the mux does other than calling one of our routes (a
	// trailing-slash redirect) becomes a JSON 404 (routeWriter).
	rw := &routeWriter{ResponseWriter: w, method: r.Method, path: r.URL.Path}
	s.mux.ServeHTTP(rw, r)
}

// routeWriter is what ServeHTTP hands the mux. A registered route unwraps
// it (and marks it routed); anything else the mux would write, such as a
// redirect, is replaced by a JSON 404, so no answer of the API is ever a
// 3xx.
type routeWriter struct {
	http.ResponseWriter
	method, path string
	routed       bool
	scratch      http.Header
	answered     bool
}

func (w *routeWriter) Header() http.Header {
	if w.routed {
		return w.ResponseWriter.Header()
	}
	if w.scratch == nil {
		w.scratch = http.Header{}
	}
	return w.scratch
}

func (w *routeWriter) WriteHeader(code int) {
	if w.routed {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if !w.answered {
		w.answered = true
		writeError(w.ResponseWriter, errdefs.NotFound("no API route %s %s (berth does not redirect: send the exact path)", w.method, w.path))
	}
}

func (w *routeWriter) Write(p []byte) (int, error) {
	if w.routed {
		return w.ResponseWriter.Write(p)
	}
	w.WriteHeader(http.StatusNotFound)
	return len(p), nil
}

// bearerToken returns the request's bearer token, or "".
func bearerToken(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return ""
	}
	return strings.TrimSpace(auth[len(prefix):])
}

func (s *server) authorized(r *http.Request) bool {
	if !s.hasKey {
		return false
	}
	auth := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(auth[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], s.keyHash[:]) == 1
}

// serve runs one handler: it writes the handler's error as JSON if nothing
// was sent yet, and otherwise aborts the connection so that the client sees
// a broken response rather than a silently short one.
func (s *server) serve(w http.ResponseWriter, r *http.Request, h handlerFunc) {
	rw := &respWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.opts.Logf("panic serving %s %s: %v", r.Method, r.URL.Path, p)
			if !rw.committed {
				writeError(rw, errdefs.Internal("internal server error"))
				return
			}
			panic(http.ErrAbortHandler)
		}
	}()
	err := h(s, rw, r)
	if err == nil {
		return
	}
	if st := api.HTTPStatus(err); st >= 500 {
		s.opts.Logf("%s %s: %v", r.Method, r.URL.Path, err)
	}
	if rw.committed {
		panic(http.ErrAbortHandler)
	}
	writeError(rw, err)
}

// WriteError answers err as the API's error JSON with its status, for a
// handler in front of the API (the daemon's cluster gate).
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

func writeError(w http.ResponseWriter, err error) {
	if d, ok := errdefs.RetryAfter(err); ok {
		// A full start queue (errdefs.TryLater): when to come back.
		w.Header().Set("Retry-After", strconv.Itoa(int(d/time.Second)))
	}
	writeJSON(w, api.HTTPStatus(err), errorBody(w, err))
}

// errorBody is err as the API's error JSON, with the request id that Guard
// put in the response header, so that a report can be matched to the log.
func errorBody(w http.ResponseWriter, err error) api.Error {
	e := api.ErrorBody(err)
	e.RequestID = w.Header().Get(reqinfo.Header)
	return e
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"code":"internal","message":"cannot encode response"}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// respWriter records whether the response has been committed. Unwrap lets
// http.ResponseController reach the real writer for Flush and deadlines.
type respWriter struct {
	http.ResponseWriter
	committed bool
}

func (w *respWriter) WriteHeader(code int) {
	w.committed = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(p []byte) (int, error) {
	w.committed = true
	return w.ResponseWriter.Write(p)
}

func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// captureWriter swallows what the mux's own 404/405 handlers write.
type captureWriter struct {
	header http.Header
	status int
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(p []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return len(p), nil
}

// errTooLarge is a body that hit its cap: status 413 (via the wrapped
// MaxBytesError) with the invalid_argument code, so clients can branch on it.
type errTooLarge struct {
	mbe *http.MaxBytesError
}

func (e errTooLarge) Error() string {
	return fmt.Sprintf("request body is larger than the %d-byte limit", e.mbe.Limit)
}
func (e errTooLarge) Unwrap() []error { return []error{e.mbe, errdefs.ErrInvalidArgument} }

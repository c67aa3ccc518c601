package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/reqinfo"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/policy"
)

// EnvdVersion is what berth reports as the sandbox's envd version. The SDK
// gates features on it; 0.6.4 enables everything berth serves.
const EnvdVersion = "0.6.13"

// Ports the SDKs address inside a sandbox.
const (
	EnvdPort        = 49983
	InterpreterPort = 49999
)

// Labels that hold a sandbox's E2B state.
const (
	labelManaged    = "e2b.sandbox"     // "1" on sandboxes made through this API
	labelTemplate   = "e2b.template"    // the template ID asked for
	labelEnd        = "e2b.end"         // end of life, RFC 3339
	labelOnTimeout  = "e2b.on-timeout"  // kill (default) or pause
	labelAutoResume = "e2b.auto-resume" // "true": traffic wakes a paused sandbox
	labelTimeout    = "e2b.timeout"     // the lifetime asked at create, seconds (auto-resume renews it)
	labelMetaPrefix = "e2b.meta."       // one label per metadata key
)

// Backend is what the E2B face needs from the control plane (package
// control's contracts; the daemon's control plane implements it).
type Backend interface {
	control.Sandboxes
	control.AgentAccess
	control.Labels
	Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error)
	GetSnapshot(ctx context.Context, id string) (api.Snapshot, error)
	ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error)
	// SetNetwork replaces the sandbox's egress policy (at once, for a
	// running sandbox).
	SetNetwork(ctx context.Context, name string, p api.NetworkPolicy) (api.NetworkPolicy, error)
}

// Options configure New.
type Options struct {
	// Metrics is the host's usage sampler (metering.Sampler.Metrics):
	// getMetrics answers its samples (every 5 s, read from the sandbox's
	// cgroups on the host). Nil: a sample is taken inside the sandbox
	// when asked, without CPU (lifecycle.go).
	Metrics func(name string) (api.SandboxMetrics, bool)
	// APIKey is what X-API-Key must carry. Empty fails closed (every
	// control-plane call is 401).
	APIKey string
	// TokenSecret keys the per-sandbox envd access tokens. Empty derives
	// one from APIKey.
	TokenSecret []byte
	// Templates maps E2B template IDs to berth image names; nil uses
	// DefaultTemplates.
	Templates map[string]string
	// Builds serves the template build API (Template.build, exists,
	// tags) over berth's Dockerfile builder, keeping uploaded file sets
	// in BuildDir; nil (or no BuildDir): those routes answer 404.
	Builds   TemplateImages
	BuildDir string
	// DefaultTimeout is the lifetime of a sandbox created without one
	// (default 300 s, the SDK's default).
	DefaultTimeout time.Duration
	// MaxTimeout caps any lifetime (default 24 h).
	MaxTimeout time.Duration
	// Tenants resolves keys other than APIKey to a tenant of the operator
	// policy (as the native API does); the tenant's calls then see and
	// touch only its own sandboxes and pass its quotas. nil: only APIKey.
	Tenants func(key string) (tenant string, ok bool)
	// Forward sends requests for sandboxes another node owns to that
	// node, and creates to the node placement chose (control/forward);
	// nil: a single host.
	Forward forward.Router
	// Node is this node's name in a cluster: the lifetime loop ends only
	// the sandboxes this node owns (every node runs one, and each acts on
	// its own). "": every sandbox (a single host).
	Node string
	Logf func(format string, args ...any)
}

// Handler serves the E2B API. Create it with New, mount it with Wrap and
// start its lifetime loop with Run.
type Handler struct {
	b       Backend
	opts    Options
	keyHash [sha256.Size]byte
	hasKey  bool
	secret  []byte

	mu       sync.Mutex
	streams  map[string]map[*streamReg]struct{} // sandbox → open data-plane streams
	procs    *procTable
	watchers *watcherTable
	owners   *ownerCache
	envd     http.Handler
	// metricHist holds the samples getMetrics took (lifecycle.go).
	metricHist metricHistory
	// tpl holds the template builds of this process (templatebuild.go).
	tpl templateBuilds
	// weakToken switches the access-token check off (BERTH_TEST_WEAKEN=
	// e2b-access-token): the negative control of the token tests.
	weakToken bool
}

type streamReg struct{ cancel context.CancelCauseFunc }

// New returns the E2B handler over b.
func New(b Backend, opts Options) *Handler {
	if opts.Templates == nil {
		opts.Templates = DefaultTemplates()
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 300 * time.Second
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = 24 * time.Hour
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	h := &Handler{b: b, opts: opts, streams: map[string]map[*streamReg]struct{}{},
		procs: newProcTable(), watchers: newWatcherTable(), owners: newOwnerCache()}
	if opts.APIKey != "" {
		h.keyHash = sha256.Sum256([]byte(opts.APIKey))
		h.hasKey = true
	}
	h.envd = h.envdMux()
	h.weakToken = weaken.Off(weaken.E2BAccessToken)
	h.secret = opts.TokenSecret
	if len(h.secret) == 0 {
		s := sha256.Sum256([]byte("berth e2b envd token\x00" + opts.APIKey))
		h.secret = s[:]
	}
	return h
}

// controlPrefixes are the control-plane paths; none collides with the
// native API (/v1/…) or the console.
// Secrets and the routes berth does not serve are claimed here so that
// they answer a clear 404 {code, message}.
var controlPrefixes = []string{"/sandboxes", "/v2/sandboxes", "/snapshots", "/templates",
	"/v2/templates", "/v3/templates", "/secrets", "/volumes", "/volumecontent"}

// hostRE parses {port}-{id}.{domain} data-plane host names.
var hostRE = regexp.MustCompile(`^([0-9]{1,5})-([a-z0-9]{20})\.`)

// Wrap returns a handler that serves the E2B API and hands everything else
// to next (the native API).
func (h *Handler) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, port, ok := dataPlaneTarget(r); ok {
			h.serveData(w, r, id, port)
			return
		}
		if isSignedFilesRequest(r) {
			h.serveSignedFiles(w, r)
			return
		}
		for _, p := range controlPrefixes {
			if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
				h.serveControl(w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// dataPlaneTarget finds the sandbox and port a data-plane request is for.
func dataPlaneTarget(r *http.Request) (id string, port int, ok bool) {
	if id = r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port = EnvdPort
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" {
			port = atoiPort(p)
		}
		return id, port, true
	}
	if m := hostRE.FindStringSubmatch(strings.ToLower(r.Host)); m != nil {
		return m[2], atoiPort(m[1]), true
	}
	return "", 0, false
}

// AppTraffic reports a data-plane request the E2B face proxies to a server
// the user runs inside a sandbox (any port but envd's and the
// interpreter's): its path is the application's, passed on as it is.
func AppTraffic(r *http.Request) bool {
	_, port, ok := dataPlaneTarget(r)
	return ok && port != EnvdPort && port != InterpreterPort
}

func atoiPort(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' || n > 65535 {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return -1
	}
	return n
}

// idRE is an E2B sandbox ID; it is also the berth sandbox name.
var idRE = regexp.MustCompile(`^[a-z0-9]{20}$`)

func validID(id string) bool { return idRE.MatchString(id) }

// newID returns a fresh sandbox ID: 20 characters of [a-z0-9].
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [20]byte
	out := make([]byte, 20)
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err)
		}
		ok := true
		for i, c := range b {
			if c >= 252 { // 252 = 7*36: reject to keep the draw uniform
				ok = false
				break
			}
			out[i] = alphabet[int(c)%36]
		}
		if ok {
			return string(out)
		}
	}
}

// accessToken is the envd access token of sandbox id.
func (h *Handler) accessToken(id string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte("envd-access-token\x00" + id))
	return "ea_" + hex.EncodeToString(m.Sum(nil))[:40]
}

func (h *Handler) tokenOK(id, got string) bool {
	if h.weakToken {
		return true
	}
	want := h.accessToken(id)
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// authorize checks the control-plane key: the daemon's key, or a
// tenant's (whose name then rides in the request's context).
func (h *Handler) authorize(r *http.Request) (*http.Request, bool) {
	if id, ok := forward.From(r.Context()); ok {
		// Forwarded by the node that authenticated the caller; only the
		// node listener's Receiver can put this in the context.
		if id.Tenant != "" {
			r = r.WithContext(policy.WithTenant(r.Context(), id.Tenant))
		}
		return r, true
	}
	key := r.Header.Get("X-API-Key")
	if key == "" {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			key = strings.TrimSpace(a[7:])
		}
	}
	if h.hasKey {
		got := sha256.Sum256([]byte(key))
		if subtle.ConstantTimeCompare(got[:], h.keyHash[:]) == 1 {
			return r, true
		}
	}
	if h.opts.Tenants != nil && key != "" {
		if tenant, ok := h.opts.Tenants(key); ok && tenant != "" {
			return r.WithContext(policy.WithTenant(r.Context(), tenant)), true
		}
	}
	return r, false
}

// apiError is the E2B error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// RequestID (berth's addition) matches the answer to the daemon's
	// request log line; writeJSON fills it in from X-Request-Id.
	RequestID string `json:"requestId,omitempty"`
}

// writeErr answers err as {code, message} with the status berth's error
// taxonomy gives it; the statuses the SDK maps (401, 404, 409, 429, 502,
// 507) come out of the same taxonomy.
func writeErr(w http.ResponseWriter, err error) {
	st := statusOf(err)
	msg := err.Error()
	if d, ok := errdefs.RetryAfter(err); ok {
		// berth's start queue is full: 429, which the SDK raises as its
		// RateLimitError, with when to come back.
		w.Header().Set("Retry-After", strconv.Itoa(int(d/time.Second)))
	}
	writeJSON(w, st, apiError{Code: st, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	if e, ok := v.(apiError); ok && e.RequestID == "" {
		e.RequestID = w.Header().Get(reqinfo.Header)
		v = e
	}
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"code":500,"message":"cannot encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// register ties a data-plane stream to its sandbox so that kill and pause
// end it with an error. The returned func unregisters it.
func (h *Handler) register(id string, cancel context.CancelCauseFunc) func() {
	reg := &streamReg{cancel: cancel}
	h.mu.Lock()
	if h.streams[id] == nil {
		h.streams[id] = map[*streamReg]struct{}{}
	}
	h.streams[id][reg] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.streams[id], reg)
		if len(h.streams[id]) == 0 {
			delete(h.streams, id)
		}
		h.mu.Unlock()
	}
}

// errSandboxGone ends streams of a killed or paused sandbox.
var errSandboxGone = errdefs.Unavailable("the sandbox was killed or paused")

func (h *Handler) endStreams(id string, cause error) {
	h.cancelStreams(id, cause)
	h.forgetRun(id)
}

// cancelStreams ends the sandbox's open streams only (a freeze: the
// processes they follow continue after the thaw, and Connect follows them
// again).
func (h *Handler) cancelStreams(id string, cause error) {
	h.mu.Lock()
	regs := h.streams[id]
	delete(h.streams, id)
	h.mu.Unlock()
	for r := range regs {
		r.cancel(cause)
	}
}

// forgetRun drops what this API remembers of the sandbox's run: its
// processes, watchers and file owners.
func (h *Handler) forgetRun(id string) {
	h.procs.forget(id)
	h.watchers.forget(id)
	h.owners.forget(id)
}

// agent returns the sandbox's agent if the sandbox is an E2B sandbox that
// runs (or may be woken: autoResume). A paused sandbox without autoResume
// is Unavailable, which the data plane answers as 502 like a gone one.
func (h *Handler) agent(ctx context.Context, id string) (*agentclient.Client, func(), error) {
	sb, err := h.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if sb.State != api.StateRunning {
		if sb.Labels[labelAutoResume] != "true" {
			return nil, nil, errdefs.Unavailable("sandbox %s is %s", id, stateOf(sb))
		}
		// Traffic wakes it: it gets its lifetime again, from now.
		life := h.opts.DefaultTimeout
		if n, err := strconv.ParseInt(sb.Labels[labelTimeout], 10, 64); err == nil && n > 0 {
			life = time.Duration(n) * time.Second
		}
		if _, err := h.b.SetLabels(ctx, id, map[string]string{labelEnd: time.Now().Add(life).UTC().Format(time.RFC3339Nano)}); err != nil {
			return nil, nil, err
		}
	}
	return h.b.Agent(ctx, id)
}

// lookup returns an E2B-managed sandbox by ID, or NotFound.
func (h *Handler) lookup(ctx context.Context, id string) (api.Sandbox, error) {
	if !validID(id) {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", id)
	}
	sb, err := h.b.Get(ctx, id)
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrNotFound) || errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", id)
		}
		return api.Sandbox{}, err
	}
	if sb.Labels[labelManaged] != "1" {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", id)
	}
	return sb, nil
}

package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/berth-sh/berth/e2b/envdpb/process/processconnect"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Identity of commands and files inside an E2B sandbox.
const (
	defaultUser = "user"
	homeDir     = "/home/user"
)

type sandboxKey struct{}

// sandboxFrom returns the sandbox ID a data-plane request was routed to.
func sandboxFrom(ctx context.Context) string {
	id, _ := ctx.Value(sandboxKey{}).(string)
	return id
}

// envdMux serves port 49983 for one request; the sandbox ID travels in the
// context.
func (h *Handler) envdMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", h.health)
	mux.HandleFunc("GET /files", h.readFiles)
	mux.HandleFunc("POST /files", h.writeFiles)
	opts := []connect.HandlerOption{connect.WithInterceptors(errorInterceptor{})}
	p, ph := processconnect.NewProcessHandler(&processService{h: h}, opts...)
	mux.Handle(p, ph)
	f, fh := filesystemconnect.NewFilesystemHandler(&filesystemService{h: h}, opts...)
	mux.Handle(f, fh)
	// envd routes berth does not serve (/envs, /metrics, /files/compose,
	// the orchestrator's /init …) answer {code, message}.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apiError{Code: 404, Message: r.Method + " " + r.URL.Path + " is not supported by berth's envd"})
	})
	return mux
}

func (h *Handler) serveData(w http.ResponseWriter, r *http.Request, id string, port int) {
	ctx := context.WithValue(r.Context(), sandboxKey{}, id)
	r = r.WithContext(ctx)
	if port == EnvdPort && r.URL.Path != "/health" && !h.envdAuthorized(r, id) {
		writeJSON(w, http.StatusUnauthorized, apiError{Code: 401, Message: "unauthorized access, please provide a valid access token or method signing if supported"})
		return
	}
	if h.opts.Forward != nil && validID(id) {
		// The owner serves the data plane (its process and watcher
		// tables, its agent). The envd token was checked here and
		// travels on (the owner checks it again); Authorization is the
		// app's own, not berth's key, and passes too.
		out, err := h.opts.Forward.Sandbox(w, r, id, forward.Route{Face: forward.API, KeepAuthorization: true})
		if err != nil {
			writeErr(w, err)
			return
		}
		if out == forward.Proxied {
			return
		}
	}
	switch port {
	case EnvdPort:
		h.envd.ServeHTTP(w, r)
	case InterpreterPort:
		h.serveInterpreter(w, r, id)
	default:
		if port < 1 {
			writeJSON(w, http.StatusBadRequest, apiError{Code: 400, Message: "invalid sandbox port"})
			return
		}
		h.proxyPort(w, r, id, port)
	}
}

// envdAuthorized checks X-Access-Token, or for /files a signature made with
// the token.
func (h *Handler) envdAuthorized(r *http.Request, id string) bool {
	if h.weakToken {
		return true
	}
	if t := r.Header.Get("X-Access-Token"); t != "" {
		return h.tokenOK(id, t)
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" {
		return h.signatureOK(r, id) == nil
	}
	return false
}

// signatureOK checks a signed /files URL: "v1_" + base64(sha256(path:op:user:token[:exp])).
func (h *Handler) signatureOK(r *http.Request, id string) error {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + h.accessToken(id)
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return errdefs.Unauthenticated("invalid signature")
		}
		if time.Now().Unix() > n {
			// Unauthenticated (401), caused by the expiry, which
			// serveSignedFiles prefers to report.
			return errdefs.Wrap(errdefs.ErrUnauthenticated, errdefs.ErrExpired, "signature is already expired")
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	if subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(want)) != 1 {
		return errdefs.Unauthenticated("invalid signature")
	}
	return nil
}

// isSignedFilesRequest is a signed /files URL fetched without the routing
// headers (E2B_SANDBOX_URL serves every sandbox, and a signed URL carries
// no sandbox ID).
func isSignedFilesRequest(r *http.Request) bool {
	return r.URL.Path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost) &&
		r.URL.Query().Get("signature") != ""
}

// serveSignedFiles finds the sandbox whose token made the signature.
func (h *Handler) serveSignedFiles(w http.ResponseWriter, r *http.Request) {
	sbs, err := h.b.List(r.Context(), listManaged())
	if err != nil {
		writeErr(w, err)
		return
	}
	var lastErr error = errdefs.Unauthenticated("invalid signature")
	for _, sb := range sbs {
		err := h.signatureOK(r, sb.Name)
		if err == nil {
			h.serveData(w, r, sb.Name, EnvdPort)
			return
		}
		if errors.Is(err, errdefs.ErrExpired) {
			lastErr = err
		}
	}
	writeJSON(w, http.StatusUnauthorized, apiError{Code: 401, Message: lastErr.Error()})
}

// health is envd's GET /health: 204 while the sandbox runs, 502 with the
// proxy's JSON once it is gone (or paused).
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	id := sandboxFrom(r.Context())
	sb, err := h.lookup(r.Context(), id)
	if err != nil || sb.State != api.StateRunning {
		writeGone(w, id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func writeGone(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{
		"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway,
	})
}

// proxyPort forwards any other port to the sandbox's service through the
// agent's TCP tunnel (so a service bound to 127.0.0.1 works).
func (h *Handler) proxyPort(w http.ResponseWriter, r *http.Request, id string, port int) {
	ag, release, err := h.agent(r.Context(), id)
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrNotFound) || errdefs.IsKind(err, errdefs.ErrUnavailable) {
			writeGone(w, id)
			return
		}
		writeErr(w, err)
		return
	}
	defer release()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "127.0.0.1:" + strconv.Itoa(port)
			pr.Out.Header.Del("E2b-Sandbox-Id")
			pr.Out.Header.Del("E2b-Sandbox-Port")
			pr.Out.Header.Del("X-Access-Token")
			pr.Out.Header.Del("X-Api-Key")
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return ag.DialPort(ctx, port)
			},
			DisableKeepAlives: true,
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, map[string]any{
				"sandboxId": id, "message": "the sandbox is running but port " + strconv.Itoa(port) + " is not open: " + err.Error(),
				"port": port, "code": http.StatusBadGateway,
			})
		},
	}
	rp.ServeHTTP(w, r)
}

// resolvePath makes an E2B path absolute: relative paths are in the
// user's home, "~" is the home.
func resolvePath(p string) string {
	if p == "" || p == "~" {
		return homeDir
	}
	if strings.HasPrefix(p, "~/") {
		p = homeDir + p[1:]
	}
	if !strings.HasPrefix(p, "/") {
		p = homeDir + "/" + p
	}
	return path.Clean(p)
}

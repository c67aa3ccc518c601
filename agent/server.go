package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/forward"
	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/interp"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Config configures a Server.
type Config struct {
	// DefaultUser runs execs and owns created files when a request names
	// no user; root is used when the sandbox has no such user.
	DefaultUser string
	// DefaultCwd, when set (the image's WORKDIR), is where execs that
	// name no cwd start, if it is a directory; otherwise the user's home.
	DefaultCwd string
	// Version is reported by /v1/health.
	Version string
	// Reaper starts and waits for every child. Required.
	Reaper *Reaper
	// EtcDir holds passwd and group; "/etc" when empty (tests point it
	// elsewhere).
	EtcDir string
	// BaseEnv is the environment every exec starts from; os.Environ() when
	// nil. The host sets the agent's environment from the image config and
	// the sandbox's env.
	BaseEnv []string
	// AwaitIdentity accepts one POST /v1/identity that replaces BaseEnv
	// (a warm-pool member, identity.go); SetProcessEnv makes that bind
	// set the agent's own environment too (the real agent, not tests).
	AwaitIdentity, SetProcessEnv bool
	// Logf logs; log.Printf when nil.
	Logf func(format string, args ...any)
	// HeartbeatInterval is how often an idle exec stream carries a
	// heartbeat frame; 2 s when zero.
	HeartbeatInterval time.Duration
	// MaxListEntries caps one listing; DefaultMaxListEntries when zero.
	MaxListEntries int
}

// Server serves the agent API.
type Server struct {
	cfg  Config
	mux  *http.ServeMux
	http *http.Server
	// procs is set by registerProcessRoutes; file calls that name a
	// session read its cwd and user through it (filescope.go).
	procs *procManager
	// id is the environment execs start from (identity.go).
	id identity
}

// maxExecBody bounds an exec request. Exec carries stdin inline, base64 in
// JSON, so its limit is large; everything else is httpio.MaxSmallBody.
const maxExecBody = 64 << 20

// NewServer returns a Server for cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Reaper == nil {
		return nil, errdefs.InvalidArgument("agent: a Reaper is required")
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root"
	}
	if cfg.EtcDir == "" {
		cfg.EtcDir = "/etc"
	}
	if cfg.BaseEnv == nil {
		cfg.BaseEnv = os.Environ()
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 2 * time.Second
	}
	if cfg.MaxListEntries <= 0 {
		cfg.MaxListEntries = DefaultMaxListEntries
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.id = identity{env: cfg.BaseEnv, await: cfg.AwaitIdentity}
	s.mux.HandleFunc("POST /v1/identity", s.handleIdentity)
	s.mux.HandleFunc("GET /v1/health", s.handleHealth)
	s.mux.HandleFunc("POST /v1/exec", s.handleExec)
	s.mux.HandleFunc("GET /v1/files/content", s.handleReadFile)
	s.mux.HandleFunc("PUT /v1/files/content", s.handleWriteFile)
	s.mux.HandleFunc("GET /v1/files/list", s.handleList)
	s.mux.HandleFunc("GET /v1/files/stat", s.handleStat)
	s.mux.HandleFunc("GET /v1/files/exists", s.handleExists)
	s.mux.HandleFunc("POST /v1/files/mkdir", s.handleMkdir)
	s.mux.HandleFunc("DELETE /v1/files", s.handleRemove)
	s.mux.HandleFunc("POST /v1/files/rename", s.handleRename)
	s.registerProcessRoutes() // processes, sessions, git (process.go)
	s.addArchiveRoutes()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpio.WriteError(w, errdefs.NotFound("no agent endpoint %s %s", r.Method, r.URL.Path))
	})
	s.http = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       10 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	s.addStreamRoutes() // terminals and file watches; needs s.http
	// The port tunnel for preview URLs; hijacked, so ended on shutdown.
	tunnels := forward.New()
	s.http.RegisterOnShutdown(tunnels.CloseAll)
	s.mux.HandleFunc("GET /v1/forward", tunnels.Handle)
	// Code contexts: their interpreters are stopped on shutdown.
	contexts := interp.New(interp.Config{
		Prepare: s.prepareWithCredential, Start: s.startCommand,
		User: s.userHome, HasProgram: s.hasProgram, Heartbeat: s.cfg.HeartbeatInterval,
	})
	s.mux.HandleFunc("POST /v1/code/contexts", contexts.HandleCreate)
	s.mux.HandleFunc("GET /v1/code/contexts", contexts.HandleList)
	s.mux.HandleFunc("DELETE /v1/code/contexts/{id}", contexts.HandleDelete)
	s.mux.HandleFunc("POST /v1/code/contexts/{id}/restart", contexts.HandleRestart)
	s.mux.HandleFunc("POST /v1/code/run", contexts.HandleRun)
	s.http.RegisterOnShutdown(contexts.CloseAll)
	return s, nil
}

// Handler returns the HTTP handler (for tests that bring their own server).
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves on ln until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits (until ctx ends) for
// in-flight requests, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	return err
}

// Signal sends sig to the process group of every exec the agent started.
func (s *Server) Signal(sig syscall.Signal) {
	for _, pid := range s.cfg.Reaper.Pids() {
		syscall.Kill(-pid, sig)
	}
}

// Listen creates the agent's unix socket at path, replacing a stale one.
// The socket is made 0600: the socket directory is visible inside the
// sandbox, and an unprivileged sandbox user who could connect would be able
// to exec as root through the agent. Host root connects regardless.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
		os.Remove(path)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: chmod %s: %w", path, err)
	}
	return ln, nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	httpio.WriteJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.cfg.Version, Protocol: wire.ProtocolVersion})
}

// pathParam reads and resolves a path query parameter.
func (s *Server) pathParam(r *http.Request, name string) (string, error) {
	q := r.URL.Query()
	if _, ok := q[name]; !ok {
		return "", errdefs.InvalidArgument("missing %s parameter", name)
	}
	sc, err := s.fileScope(r)
	if err != nil {
		return "", err
	}
	return fspath.Resolve(q.Get(name), sc.base)
}

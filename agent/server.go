package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Config configures a Server.
type Config struct {
	// DefaultUser runs execs and owns created files when a request names
	// no user; root is used when the sandbox has no such user.
	DefaultUser string
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
}

// Request body limits. Exec carries stdin inline, base64 in JSON, so its
// limit is large; everything else is small.
const (
	maxExecBody  = 64 << 20
	maxSmallBody = 64 << 10
)

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
		writeError(w, errdefs.NotFound("no agent endpoint %s %s", r.Method, r.URL.Path))
	})
	s.http = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       10 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	s.addStreamRoutes()  // terminals and file watches; needs s.http
	s.addForwardRoutes() // port tunnel for preview URLs (forward.go); needs s.http
	s.addInterpRoutes()  // code contexts (interp.go); needs s.http
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
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.cfg.Version, Protocol: ProtocolVersion})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(data)
}

func writeError(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		err = errdefs.InvalidArgument("request body exceeds %d bytes", tooBig.Limit)
	}
	writeJSON(w, api.HTTPStatus(err), api.ErrorBody(err))
}

// decodeJSON reads a bounded JSON request body into v. The body must be
// valid UTF-8: encoding/json would silently turn invalid bytes into U+FFFD,
// so a path like "/tmp/\xff" would name a different file than was asked for.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return err
		}
		return errdefs.InvalidArgument("reading request body: %v", err)
	}
	if !utf8.Valid(data) {
		return errdefs.InvalidArgument("request body is not valid UTF-8")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.InvalidArgument("invalid JSON request body: %v", err)
	}
	return nil
}

// maxPath is PATH_MAX; longer paths are refused before any syscall.
const maxPath = 4096

// checkPath rejects paths that no file API should accept: empty, longer
// than PATH_MAX, holding NUL (which would truncate the path at the syscall
// boundary) or not UTF-8 (checklist #7).
func checkPath(p string) error {
	switch {
	case p == "":
		return errdefs.InvalidArgument("path is empty")
	case len(p) > maxPath:
		return errdefs.InvalidArgument("path is longer than %d bytes", maxPath)
	case strings.IndexByte(p, 0) >= 0:
		return errdefs.InvalidArgument("path contains a NUL byte")
	case !utf8.ValidString(p):
		return errdefs.InvalidArgument("path is not valid UTF-8")
	}
	return nil
}

// resolvePath validates p and makes it absolute: relative paths are relative
// to home. The result is lexically cleaned; symlinks are left to the kernel,
// which resolves them inside the sandbox's root.
func resolvePath(p, home string) (string, error) {
	if err := checkPath(p); err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(home, p)
	}
	return filepath.Clean(p), nil
}

// pathParam reads and resolves a path query parameter.
func (s *Server) pathParam(r *http.Request, name string) (string, error) {
	q := r.URL.Query()
	if _, ok := q[name]; !ok {
		return "", errdefs.InvalidArgument("missing %s parameter", name)
	}
	return resolvePath(q.Get(name), s.defaultAccount().home)
}

// fsError turns a filesystem error into an errdefs kind with a message that
// names the path the user gave.
func fsError(op, path string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		if errdefs.Code(err) != "internal" {
			return err
		}
		return fmt.Errorf("%s %s: %w", op, path, err)
	}
	switch errno {
	case syscall.ENOENT:
		return errdefs.NotFound("%s %s: no such file or directory", op, path)
	case syscall.EEXIST:
		return errdefs.AlreadyExists("%s %s: file exists", op, path)
	case syscall.ENOTDIR:
		return errdefs.InvalidArgument("%s %s: a path component is not a directory", op, path)
	case syscall.EISDIR:
		return errdefs.InvalidArgument("%s %s: is a directory", op, path)
	case syscall.EINVAL:
		return errdefs.InvalidArgument("%s %s: invalid argument", op, path)
	case syscall.ENAMETOOLONG:
		return errdefs.InvalidArgument("%s %s: file name too long", op, path)
	case syscall.ELOOP:
		return errdefs.InvalidArgument("%s %s: too many levels of symbolic links", op, path)
	case syscall.ENOTEMPTY:
		return errdefs.FailedPrecondition("%s %s: directory not empty", op, path)
	case syscall.EXDEV:
		return errdefs.FailedPrecondition("%s %s: cannot move across filesystems", op, path)
	case syscall.EBUSY:
		return errdefs.FailedPrecondition("%s %s: device or resource busy", op, path)
	case syscall.EACCES, syscall.EPERM:
		return errdefs.PermissionDenied("%s %s: permission denied", op, path)
	case syscall.EROFS:
		return errdefs.PermissionDenied("%s %s: read-only file system", op, path)
	case syscall.ENOSPC, syscall.EDQUOT:
		return errdefs.ResourceExhausted("%s %s: no space left on device", op, path)
	}
	return errdefs.Internal("%s %s: %v", op, path, errno)
}

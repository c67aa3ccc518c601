package server

import (
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Limits of the dev-loop routes. They mirror the agent's own limits so that
// a request the agent would refuse is refused here, before a sleeping
// sandbox is woken for it.
const (
	maxCommandBytes   = 128 << 10
	maxLogBufferBytes = 64 << 20
	maxWaitPattern    = 4096
	maxGitURL         = 4096
	maxGitBranch      = 256
	maxGitDepth       = 1 << 20
	maxKillGrace      = time.Minute
	maxWatchGlobs     = 64
	maxWatchGlobLen   = 256
	maxTerminalSize   = 1000 // cols or rows
	maxShellBytes     = 4096
)

var (
	// devIDRE is the agent's rule for process and session ids. The server
	// checks it too, so an id can never change the shape of the agent URL
	// it is put in (it is path-escaped there as well).
	devIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	// termIDRE is the agent's rule for terminal ids ("." and ".." aside).
	termIDRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	signalRE  = regexp.MustCompile(`^(SIG)?[A-Z0-9+-]{1,16}$`)
	waitModes = map[string]bool{"": true, "http": true, "tcp": true}
)

func validateDevID(kind, id string) error {
	if !devIDRE.MatchString(id) {
		return errdefs.InvalidArgument("invalid %s id %q: use 1-128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit", kind, id)
	}
	return nil
}

func validateTermID(id string) error {
	if !termIDRE.MatchString(id) || id == "." || id == ".." {
		return errdefs.InvalidArgument("invalid terminal id %q: use 1-128 characters of A-Z a-z 0-9 . _ -", id)
	}
	return nil
}

// pathDevID returns the validated {id} of a process or session route.
func pathDevID(r *http.Request, kind string) (string, error) {
	id := r.PathValue("id")
	return id, validateDevID(kind, id)
}

func validateTimeoutMs(field string, ms int64) error {
	if ms < 0 || ms > maxTimeoutMs {
		return errdefs.InvalidArgument("%s must be between 0 (none) and %d, got %d", field, maxTimeoutMs, ms)
	}
	return nil
}

func validateUser(u string) error {
	if len(u) > maxUserBytes || hasControl(u) || !utf8.ValidString(u) {
		return errdefs.InvalidArgument("invalid user %q", u)
	}
	return nil
}

func validateStartProcess(req *api.StartProcessRequest) error {
	switch {
	case strings.TrimSpace(req.Command) == "":
		return errdefs.InvalidArgument("command is required: a shell command such as \"npm run dev\"")
	case len(req.Command) > maxCommandBytes:
		return errdefs.InvalidArgument("command is %d bytes, max %d", len(req.Command), maxCommandBytes)
	case hasNUL(req.Command) || !utf8.ValidString(req.Command):
		return errdefs.InvalidArgument("command contains a NUL byte or invalid UTF-8")
	case req.LogBufferBytes != 0 && (req.LogBufferBytes < 1024 || req.LogBufferBytes > maxLogBufferBytes):
		return errdefs.InvalidArgument("logBufferBytes must be 0 (default 1 MiB) or between 1024 and %d, got %d", maxLogBufferBytes, req.LogBufferBytes)
	}
	if req.ID != "" {
		if err := validateDevID("process", req.ID); err != nil {
			return err
		}
	}
	if req.SessionID != "" {
		if err := validateDevID("session", req.SessionID); err != nil {
			return err
		}
	}
	if req.Cwd != "" {
		if err := validatePath("cwd", req.Cwd); err != nil {
			return err
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	if err := validateUser(req.User); err != nil {
		return err
	}
	return validateTimeoutMs("timeoutMs", req.TimeoutMs)
}

func validateUpdateSession(req *api.UpdateSessionRequest) error {
	if len(req.Env) == 0 && req.DefaultTimeoutMs == nil {
		return errdefs.InvalidArgument("nothing to update: set env or defaultTimeoutMs")
	}
	if t := req.DefaultTimeoutMs; t != nil {
		if err := validateTimeoutMs("defaultTimeoutMs", *t); err != nil {
			return err
		}
	}
	return validateEnv("env", req.Env)
}

func validateCreateSession(req *api.CreateSessionRequest) error {
	if err := validateTimeoutMs("defaultTimeoutMs", req.DefaultTimeoutMs); err != nil {
		return err
	}
	if req.ID != "" {
		if err := validateDevID("session", req.ID); err != nil {
			return err
		}
	}
	if req.Cwd != "" {
		if err := validatePath("cwd", req.Cwd); err != nil {
			return err
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	return validateUser(req.User)
}

func validateWaitLog(req *api.WaitLogRequest) error {
	switch {
	case req.Pattern == "":
		return errdefs.InvalidArgument("pattern is required")
	case len(req.Pattern) > maxWaitPattern:
		return errdefs.InvalidArgument("pattern is %d bytes, max %d", len(req.Pattern), maxWaitPattern)
	case !utf8.ValidString(req.Pattern) || hasNUL(req.Pattern):
		return errdefs.InvalidArgument("pattern contains a NUL byte or invalid UTF-8")
	}
	if req.Regex {
		if _, err := regexp.Compile(req.Pattern); err != nil {
			return errdefs.InvalidArgument("pattern is not a valid RE2 regular expression: %w", err)
		}
	}
	return validateTimeoutMs("timeoutMs", req.TimeoutMs)
}

func validateWaitPort(req *api.WaitPortRequest) error {
	switch {
	case req.Port < 1 || req.Port > 65535:
		return errdefs.InvalidArgument("port must be from 1 to 65535, got %d", req.Port)
	case !waitModes[req.Mode]:
		return errdefs.InvalidArgument("mode must be \"http\" (default) or \"tcp\", got %q", req.Mode)
	case len(req.Path) > maxPathBytes || hasControl(req.Path) || !utf8.ValidString(req.Path):
		return errdefs.InvalidArgument("invalid path %q", req.Path)
	case req.Path != "" && !strings.HasPrefix(req.Path, "/"):
		return errdefs.InvalidArgument("path must start with '/', got %q", req.Path)
	case req.StatusMin < 0 || req.StatusMin > 999 || req.StatusMax < 0 || req.StatusMax > 999:
		return errdefs.InvalidArgument("statusMin and statusMax must be HTTP status codes (100-999)")
	case req.StatusMin != 0 && req.StatusMax != 0 && req.StatusMin > req.StatusMax:
		return errdefs.InvalidArgument("statusMin %d is above statusMax %d", req.StatusMin, req.StatusMax)
	case req.IntervalMs < 0:
		return errdefs.InvalidArgument("intervalMs must not be negative")
	}
	return validateTimeoutMs("timeoutMs", req.TimeoutMs)
}

// validateGitCheckout refuses what could be taken for a git option: a URL
// or branch starting with '-' is argument injection (CVE-2017-1000117,
// "ssh://-oProxyCommand=..."), even though the agent also passes them after
// "--".
func validateGitCheckout(req *api.GitCheckoutRequest) error {
	switch {
	case req.URL == "":
		return errdefs.InvalidArgument("url is required")
	case strings.HasPrefix(req.URL, "-"):
		return errdefs.InvalidArgument("git url %q must not start with '-'", req.URL)
	case len(req.URL) > maxGitURL || hasControl(req.URL) || !utf8.ValidString(req.URL) || strings.ContainsAny(req.URL, " \t"):
		return errdefs.InvalidArgument("invalid git url %q", req.URL)
	case len(req.Branch) > maxGitBranch || hasControl(req.Branch) || !utf8.ValidString(req.Branch) || strings.HasPrefix(req.Branch, "-"):
		return errdefs.InvalidArgument("invalid branch %q", req.Branch)
	case req.Depth < 0 || req.Depth > maxGitDepth:
		return errdefs.InvalidArgument("depth must be between 0 (full history) and %d, got %d", maxGitDepth, req.Depth)
	}
	if req.TargetDir != "" {
		if err := validatePath("targetDir", req.TargetDir); err != nil {
			return err
		}
	}
	if err := validateUser(req.User); err != nil {
		return err
	}
	return validateTimeoutMs("timeoutMs", req.TimeoutMs)
}

func validateCreateTerminal(req *api.CreateTerminalRequest) error {
	if req.ID != "" {
		if err := validateTermID(req.ID); err != nil {
			return err
		}
	}
	if err := validateTermSize(req.Cols, req.Rows); err != nil {
		return err
	}
	if len(req.Shell) > maxShellBytes || hasControl(req.Shell) || !utf8.ValidString(req.Shell) {
		return errdefs.InvalidArgument("invalid shell %q", req.Shell)
	}
	if req.Cwd != "" {
		if err := validatePath("cwd", req.Cwd); err != nil {
			return err
		}
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	return validateUser(req.User)
}

func validateTermSize(cols, rows int) error {
	if cols < 0 || cols > maxTerminalSize || rows < 0 || rows > maxTerminalSize {
		return errdefs.InvalidArgument("cols and rows must be between 1 and %d (0: default), got %dx%d", maxTerminalSize, cols, rows)
	}
	return nil
}

// queryInt parses an optional integer query parameter in [lo, hi].
func queryInt(r *http.Request, key string, lo, hi int) (int, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errdefs.InvalidArgument("query parameter %s: want a number from %d to %d, got %q", key, lo, hi, v)
	}
	return n, nil
}

// queryGrace parses ?graceMs= (the time between SIGTERM and SIGKILL):
// absent means the agent's default, 0 means none.
func queryGrace(r *http.Request) (time.Duration, error) {
	q := r.URL.Query()
	if !q.Has("graceMs") {
		return 0, nil
	}
	ms, err := strconv.ParseInt(q.Get("graceMs"), 10, 64)
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxKillGrace {
		return 0, errdefs.InvalidArgument("query parameter graceMs: want 0 to %d milliseconds, got %q", maxKillGrace.Milliseconds(), q.Get("graceMs"))
	}
	if ms == 0 {
		return -1, nil // agentclient: negative means no grace
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func querySignal(r *http.Request) (string, error) {
	sig := strings.ToUpper(r.URL.Query().Get("signal"))
	if sig != "" && !signalRE.MatchString(sig) {
		return "", errdefs.InvalidArgument("query parameter signal: want a signal name such as TERM, KILL or INT, got %q", r.URL.Query().Get("signal"))
	}
	return sig, nil
}

func validateGlobs(kind string, globs []string) error {
	if len(globs) > maxWatchGlobs {
		return errdefs.InvalidArgument("at most %d %s globs, got %d", maxWatchGlobs, kind, len(globs))
	}
	for _, g := range globs {
		if len(g) > maxWatchGlobLen || hasNUL(g) || !utf8.ValidString(g) {
			return errdefs.InvalidArgument("%s glob %q: at most %d bytes of UTF-8 without NUL", kind, g, maxWatchGlobLen)
		}
		if _, err := path.Match(g, ""); err != nil {
			return errdefs.InvalidArgument("invalid %s glob %q: %w", kind, g, err)
		}
	}
	return nil
}

// validateStart checks a create's start command: its shape, then the
// command, cwd, env and user as a background process's, and its readiness
// probe as a wait call's.
func validateStart(s *api.StartCommand) error {
	if s == nil {
		return nil
	}
	if err := s.CheckShape(); err != nil {
		return err
	}
	if !s.Image {
		if err := validateShellCommand("start.command", s.Command); err != nil {
			return err
		}
	}
	if s.Cwd != "" {
		if err := validatePath("start.cwd", s.Cwd); err != nil {
			return err
		}
	}
	if err := validateEnv("start.env", s.Env); err != nil {
		return err
	}
	if err := validateUser(s.User); err != nil {
		return errdefs.InvalidArgument("start.user: %w", err)
	}
	if r := s.Ready; r != nil {
		var err error
		switch {
		case r.Port != nil:
			err = validateWaitPort(r.Port)
		case r.Log != nil:
			err = validateWaitLog(r.Log)
		default:
			err = validateReadyCommand(r.Command)
		}
		if err != nil {
			return errdefs.InvalidArgument("start.ready: %w", err)
		}
	}
	return nil
}

func validateReadyCommand(c *api.ReadyCommand) error {
	if err := validateShellCommand("command", c.Command); err != nil {
		return err
	}
	if c.IntervalMs < 0 {
		return errdefs.InvalidArgument("intervalMs must not be negative")
	}
	return validateTimeoutMs("timeoutMs", c.TimeoutMs)
}

// validateShellCommand checks a command run with /bin/sh -c: not blank,
// bounded, no NUL, valid UTF-8.
func validateShellCommand(field, c string) error {
	switch {
	case strings.TrimSpace(c) == "":
		return errdefs.InvalidArgument("%s is blank", field)
	case len(c) > maxCommandBytes:
		return errdefs.InvalidArgument("%s is %d bytes, max %d", field, len(c), maxCommandBytes)
	case hasNUL(c) || !utf8.ValidString(c):
		return errdefs.InvalidArgument("%s contains a NUL byte or invalid UTF-8", field)
	}
	return nil
}

package agent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	defaultCloneTimeout = 10 * time.Minute
	maxCaptured         = 64 << 10
)

// Accepted git URL forms. Plain local paths are not accepted (use
// file://), and neither are remote-helper forms like ext::<command>, which
// make git run an arbitrary command (the ext transport is also what the
// option-injection bugs CVE-2017-1000117 and CVE-2022-24765-era reports
// lean on).
var (
	allowedGitSchemes = map[string]bool{"https": true, "http": true, "git": true, "ssh": true, "git+ssh": true, "ssh+git": true, "file": true}
	scpLikeURL        = regexp.MustCompile(`^(?:[A-Za-z0-9._~+-]+@)?([A-Za-z0-9][A-Za-z0-9.-]*):([^/].*|/.+)$`)
	remoteHelperURL   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*::`)
)

// checkGitURL refuses URLs git could read as an option or as a command.
// `git clone -- URL` already stops URL from being parsed as an option; the
// checks below also stop a host that ssh would parse as an option
// (ssh://-oProxyCommand=..., CVE-2017-1000117) and remote helpers.
func checkGitURL(raw string) error {
	if raw == "" {
		return errdefs.InvalidArgument("invalid git URL: empty")
	}
	if len(raw) > 4096 {
		return errdefs.InvalidArgument("invalid git URL: longer than 4096 bytes")
	}
	for _, c := range raw {
		if c <= ' ' || c == 0x7f {
			return errdefs.InvalidArgument("invalid git URL %q: contains whitespace or control characters", raw)
		}
	}
	if raw[0] == '-' {
		return errdefs.InvalidArgument("invalid git URL %q: must not start with '-'", raw)
	}
	if remoteHelperURL.MatchString(raw) {
		return errdefs.InvalidArgument("invalid git URL %q: remote helper (<transport>::) URLs are not allowed", raw)
	}
	if strings.Contains(raw, "://") {
		u, err := url.Parse(raw)
		if err != nil {
			return errdefs.InvalidArgument("invalid git URL %q: %w", raw, err)
		}
		if !allowedGitSchemes[strings.ToLower(u.Scheme)] {
			return errdefs.InvalidArgument("invalid git URL %q: scheme %q is not one of https, http, git, ssh, file", raw, u.Scheme)
		}
		if u.Scheme == "file" {
			if u.Host != "" && u.Host != "localhost" || u.Path == "" {
				return errdefs.InvalidArgument("invalid git URL %q: want file:///absolute/path", raw)
			}
			return nil
		}
		if u.Host == "" {
			return errdefs.InvalidArgument("invalid git URL %q: no host", raw)
		}
		if strings.HasPrefix(u.Host, "-") || (u.User != nil && strings.HasPrefix(u.User.Username(), "-")) {
			return errdefs.InvalidArgument("invalid git URL %q: host or user must not start with '-'", raw)
		}
		return nil
	}
	if m := scpLikeURL.FindStringSubmatch(raw); m != nil && !strings.HasPrefix(m[1], "-") {
		return nil
	}
	return errdefs.InvalidArgument("invalid git URL %q: want https://, http://, git://, ssh://, file:// or user@host:path", raw)
}

// checkBranch applies the parts of git check-ref-format that matter here.
func checkBranch(b string) error {
	bad := b == "" || len(b) > 255 || b[0] == '-' || strings.Contains(b, "..") || strings.Contains(b, "@{") ||
		strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".")
	for _, c := range b {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) {
			bad = true
		}
	}
	if bad {
		return errdefs.InvalidArgument("invalid branch name %q", b)
	}
	return nil
}

// repoName derives the default directory name from a URL, as git does.
func repoName(raw string) string {
	s := strings.TrimRight(raw, "/")
	if i := strings.LastIndexAny(s, "/:"); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSuffix(s, ".git")
	if s == "" || s == "." || s == ".." {
		return ""
	}
	return s
}

func (m *procManager) handleGitCheckout(w http.ResponseWriter, r *http.Request) {
	var req api.GitCheckoutRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	plan, target, err := m.s.prepareClone(&req)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	m.s.slowJSON(w, r, func(ctx context.Context) (any, error) {
		return m.s.gitClone(ctx, &req, plan, target)
	})
}

// prepareClone validates a checkout request and builds the git command.
func (s *Server) prepareClone(req *api.GitCheckoutRequest) (*execPlan, string, error) {
	if err := checkGitURL(req.URL); err != nil {
		return nil, "", err
	}
	if req.Branch != "" {
		if err := checkBranch(req.Branch); err != nil {
			return nil, "", err
		}
	}
	if req.Depth < 0 || req.Depth > 1<<30 {
		return nil, "", errdefs.InvalidArgument("depth %d out of range", req.Depth)
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > child.MaxTimeoutMs {
		return nil, "", errdefs.InvalidArgument("timeoutMs %d out of range [0, %d]", req.TimeoutMs, int64(child.MaxTimeoutMs))
	}
	acct, err := s.resolveUser(req.User)
	if err != nil {
		return nil, "", err
	}
	target := req.TargetDir
	if target == "" {
		name := repoName(req.URL)
		if name == "" {
			return nil, "", errdefs.InvalidArgument("cannot derive a directory name from %q; set targetDir", req.URL)
		}
		target = name
	}
	if target, err = fspath.Resolve(target, acct.home); err != nil {
		return nil, "", err
	}
	argv := []string{"git", "clone", "--quiet"}
	if req.Depth > 0 {
		argv = append(argv, "--depth", strconv.Itoa(req.Depth))
	}
	if req.Branch != "" {
		argv = append(argv, "--branch", req.Branch)
	}
	argv = append(argv, "--", req.URL, target)
	timeout := req.TimeoutMs
	if timeout == 0 {
		timeout = defaultCloneTimeout.Milliseconds()
	}
	plan, err := s.prepareExec(&api.ExecRequest{
		Argv: argv, User: acct.name, Cwd: "/", TimeoutMs: timeout,
		Env: map[string]string{
			// Never wait for a password nobody will type.
			"GIT_TERMINAL_PROMPT": "0",
			"GCM_INTERACTIVE":     "never",
			"GIT_SSH_COMMAND":     "ssh -o BatchMode=yes",
			// English messages: the error classifier reads them.
			"LC_ALL": "C",
		},
	})
	if err != nil {
		if errdefs.Code(err) == "not_found" {
			return nil, "", errdefs.FailedPrecondition("git is not installed in the sandbox")
		}
		return nil, "", err
	}
	return plan, target, nil
}

func (s *Server) gitClone(ctx context.Context, req *api.GitCheckoutRequest, plan *execPlan, target string) (res *api.GitCheckoutResult, err error) {
	// A clone that fails after it made its target (killed on a timeout or
	// a cancelled request, say) leaves a partial tree that would make the
	// retry fail with "already exists": the directory is removed again
	// when this clone was the one that created it.
	if _, statErr := os.Lstat(target); errors.Is(statErr, fs.ErrNotExist) {
		defer func() {
			if err != nil {
				_ = os.RemoveAll(target)
			}
		}()
	}
	_, stderr, e, timedOut, err := s.capture(ctx, plan)
	if err != nil {
		return nil, err
	}
	if timedOut {
		return nil, errdefs.New(errdefs.ErrDeadlineExceeded, "git clone %s timed out after %s", req.URL, plan.timeout)
	}
	if e.Lost {
		return nil, errdefs.Internal("git clone %s: exit status lost", req.URL)
	}
	if ctx.Err() != nil {
		return nil, errdefs.Unavailable("git clone %s cancelled: %w", req.URL, ctx.Err())
	}
	if code := child.ExitStatus(e.Status).ExitCode; code != 0 || e.Status.Signaled() {
		return nil, classifyGitError(req.URL, req.Branch, target, string(stderr), code)
	}
	res = &api.GitCheckoutResult{URL: req.URL, TargetDir: target, Branch: req.Branch}
	// Best effort: which branch and commit we got.
	for i, args := range [][]string{{"symbolic-ref", "--short", "-q", "HEAD"}, {"rev-parse", "-q", "--verify", "HEAD"}} {
		q := *plan
		q.argv = append([]string{"git", "-C", target}, args...)
		q.timeout = 30 * time.Second
		out, _, e, _, err := s.capture(ctx, &q)
		if err != nil || e.Lost || e.Status.ExitStatus() != 0 {
			continue
		}
		if v := strings.TrimSpace(string(out)); i == 0 {
			res.Branch = v
		} else {
			res.Commit = v
		}
	}
	return res, nil
}

// capture runs plan to completion with /dev/null as stdin and returns the
// first 64 KiB of stdout and the last 64 KiB of stderr. The process tree is
// killed on timeout or when ctx ends.
func (s *Server) capture(ctx context.Context, plan *execPlan) (stdout, stderr []byte, e child.Exit, timedOut bool, err error) {
	cred, err := credentialFor(plan.acct)
	if err != nil {
		return nil, nil, child.Exit{}, false, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, nil, child.Exit{}, false, errdefs.Internal("open %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, child.Exit{}, false, errdefs.ResourceExhausted("create pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, child.Exit{}, false, errdefs.ResourceExhausted("create pipe: %w", err)
	}
	defer outR.Close()
	defer errR.Close()
	attr := &syscall.ProcAttr{Dir: plan.dir, Env: plan.env, Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd()},
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: cred}}
	pid, exitCh, err := s.cfg.Reaper.Start(plan.argv0, plan.argv, attr)
	outW.Close()
	errW.Close()
	if err != nil {
		return nil, nil, child.Exit{}, false, startError(plan, err)
	}
	var wg sync.WaitGroup
	var outBuf, errBuf bytes.Buffer
	read := func(f *os.File, b *bytes.Buffer, tail bool) {
		defer wg.Done()
		child.ReadPipe(f, func(p []byte) bool {
			b.Write(p)
			if b.Len() > maxCaptured {
				if tail {
					keep := append([]byte(nil), b.Bytes()[b.Len()-maxCaptured:]...)
					b.Reset()
					b.Write(keep)
				} else {
					b.Truncate(maxCaptured)
				}
			}
			return true
		})
	}
	wg.Add(2)
	go read(outR, &outBuf, false)
	go read(errR, &errBuf, true)
	var timer <-chan time.Time
	if plan.timeout > 0 {
		t := time.NewTimer(plan.timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case e = <-exitCh:
	case <-timer:
		timedOut = true
		child.KillTree(pid)
		e = <-exitCh
	case <-ctx.Done():
		child.KillTree(pid)
		e = <-exitCh
	}
	d := time.Now().Add(child.DrainDelay)
	outR.SetReadDeadline(d)
	errR.SetReadDeadline(d)
	wg.Wait()
	return outBuf.Bytes(), errBuf.Bytes(), e, timedOut, nil
}

// classifyGitError turns git clone's stderr and exit code into an error of
// the right kind. Order matters: an HTTP 404 is also "unable to access",
// and GitHub's "Repository not found" is followed by "Could not read from
// remote repository".
func classifyGitError(repo, branch, target, stderr string, code int) error {
	low := strings.ToLower(stderr)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(low, s) {
				return true
			}
		}
		return false
	}
	detail := gitDetail(stderr)
	switch {
	case has("remote branch") && has("not found"), has("could not find remote branch"):
		return errdefs.NotFound("branch %q not found in %s", branch, repo)
	case has("already exists and is not an empty directory"):
		return errdefs.AlreadyExists("target directory %s already exists and is not empty", target)
	case has("repository not found", "does not appear to be a git repository", "returned error: 404", "no such repository",
		// git daemon answers this for a path it does not serve.
		"repository not exported"),
		has("fatal: repository '") && has("' not found"):
		return errdefs.NotFound("git repository %s not found (%s)", repo, detail)
	case has("returned error: 403"):
		return errdefs.PermissionDenied("access to git repository %s denied (%s)", repo, detail)
	case has("authentication failed", "could not read username", "could not read password",
		"terminal prompts disabled", "permission denied (publickey", "permission denied (password",
		"returned error: 401", "invalid username or password", "host key verification failed"):
		return errdefs.Unauthenticated("authentication to git repository %s failed (%s); private repositories need credentials injected by the egress policy", repo, detail)
	case has("could not create work tree dir", "could not create leading directories") && has("permission denied"):
		return errdefs.PermissionDenied("cannot create %s: permission denied", target)
	case has("no space left on device", "disk quota exceeded"):
		return errdefs.NoSpace("git clone %s: no space left on device", repo)
	case has("unable to find remote helper", "transport '") && !has("unable to access"):
		return errdefs.InvalidArgument("git cannot use the URL %s (%s)", repo, detail)
	case has("could not resolve host", "could not resolve hostname", "temporary failure in name resolution",
		"name or service not known", "failed to connect", "connection refused", "connection timed out",
		"operation timed out", "network is unreachable", "couldn't connect to server", "no route to host",
		"connection reset", "ssl certificate problem", "gnutls", "the remote end hung up unexpectedly",
		"early eof", "rpc failed", "unable to access", "could not read from remote repository"):
		return errdefs.Unavailable("cannot reach git repository %s (%s)", repo, detail)
	}
	return errdefs.Internal("git clone %s failed with exit code %d (%s)", repo, code, detail)
}

// gitDetail is the last meaningful lines of git's stderr, shortened.
func gitDetail(stderr string) string {
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	d := strings.Join(lines, "; ")
	if len(d) > 512 {
		d = d[:512] + "…"
	}
	if d == "" {
		d = "git printed nothing"
	}
	return d
}

package agent

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxSessions bounds the number of session shells.
const maxSessions = 64

// session is a persistent shell: env and cwd persist between its commands,
// which run one at a time. Sessions share the filesystem and process table.
type session struct {
	m         *procManager
	id        string
	acct      account
	shellPath string
	env       []string // the environment a (re)started shell gets
	dir       string   // the directory a (re)started shell starts in
	createdAt time.Time
	slot      chan struct{} // one command at a time

	mu      sync.Mutex
	sh      *shell
	deleted bool
	// defaultTimeout applies to a command that sets no timeoutMs; 0: none.
	defaultTimeout time.Duration
	// cwd is the shell's directory after its last command ("" before the
	// first, and after a restart).
	cwd string
	// pending is a restart notice not yet shown to the user (the restart
	// happened in an internal command).
	pending string
}

func (m *procManager) session(id string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions[id]; s != nil {
		return s, nil
	}
	return nil, errdefs.NotFound("no session %q", id)
}

// ensureShell returns the live shell, starting a new one when the previous
// one died; restarted and notice say so.
func (sess *session) ensureShell() (sh *shell, restarted bool, notice string, err error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.deleted {
		return nil, false, "", errdefs.NotFound("session %s was deleted", sess.id)
	}
	if sess.sh != nil && sess.sh.alive() {
		if sess.pending != "" {
			notice, sess.pending = sess.pending, ""
			return sess.sh, true, notice, nil
		}
		return sess.sh, false, "", nil
	}
	if sess.sh != nil {
		restarted = true
		notice = fmt.Sprintf("The session's shell had exited (%s); this command ran in a new shell, so the working directory, exported variables and shell functions were reset.", sess.sh.describeExit())
	}
	sh, err = sess.startShell()
	if err != nil {
		return nil, false, "", err
	}
	sess.sh, sess.cwd = sh, "" // a new shell starts in sess.dir
	return sh, restarted, notice, nil
}

// snapshot returns the session's current working directory and exported
// environment, for a background process started "in" the session.
func (sess *session) snapshot(ctx context.Context) (string, map[string]string, error) {
	quit := make(chan struct{})
	defer close(quit)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run, err := sess.run(ctx, shellCommand{text: "pwd && command env -0"}, quit)
	if err != nil {
		return "", nil, err
	}
	var out bytes.Buffer
	for c := range run.out {
		if c.t == wire.Stdout && out.Len() < 8<<20 {
			out.Write(c.p)
		}
	}
	if run.result.Restarted {
		sess.mu.Lock()
		sess.pending = run.result.Notice
		sess.mu.Unlock()
	}
	if run.err != nil {
		return "", nil, run.err
	}
	cwd, rest, _ := strings.Cut(out.String(), "\n")
	if run.result.ExitCode != 0 || run.result.ShellExited {
		// No env(1) with -0 (a minimal image): fall back to the
		// session's initial environment and the shell's directory.
		info := sess.info()
		env := make(map[string]string)
		for _, kv := range sess.env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		return info.Cwd, env, nil
	}
	env := make(map[string]string)
	for _, kv := range strings.Split(rest, "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return cwd, env, nil
}

func (sess *session) info() api.SessionInfo {
	sess.mu.Lock()
	sh := sess.sh
	timeout := sess.defaultTimeout
	cwd := sess.cwd
	sess.mu.Unlock()
	in := api.SessionInfo{ID: sess.id, Shell: sess.shellPath, User: sess.acct.name, Cwd: sess.dir, CreatedAt: sess.createdAt,
		DefaultTimeoutMs: timeout.Milliseconds()}
	if sh != nil && sh.alive() {
		in.PID, in.Alive = sh.pid, true
		if cwd != "" {
			// Recorded after each command: reading /proc/PID/cwd needs
			// ptrace access, which a sandbox's agent may not have.
			in.Cwd = cwd
		} else if c, err := os.Readlink("/proc/" + strconv.Itoa(sh.pid) + "/cwd"); err == nil {
			in.Cwd = c
		}
	}
	return in
}

func (m *procManager) handleCreateSession(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSessionRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	sess, err := m.createSession(&req)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusCreated, sess.info())
}

func (m *procManager) createSession(req *api.CreateSessionRequest) (*session, error) {
	if req.ID != "" && !validID.MatchString(req.ID) {
		return nil, errdefs.InvalidArgument("invalid session id %q: use letters, digits, '.', '_' and '-' (at most 128)", req.ID)
	}
	for k := range req.Env {
		if !child.ValidShellName(k) {
			return nil, errdefs.InvalidArgument("invalid environment variable name %q", k)
		}
	}
	if req.DefaultTimeoutMs < 0 || req.DefaultTimeoutMs > child.MaxTimeoutMs {
		return nil, errdefs.InvalidArgument("defaultTimeoutMs %d out of range [0, %d]", req.DefaultTimeoutMs, int64(child.MaxTimeoutMs))
	}
	plan, err := m.s.prepareExec(&api.ExecRequest{Argv: []string{"sh"}, Cwd: req.Cwd, Env: req.Env, User: req.User})
	if err != nil {
		return nil, err
	}
	envPath := "/usr/bin:/bin"
	for _, kv := range plan.env {
		if strings.HasPrefix(kv, "PATH=") {
			envPath = kv[5:]
		}
	}
	shellPath, err := lookPath("bash", envPath, plan.dir)
	if err != nil {
		if shellPath, err = lookPath("sh", envPath, plan.dir); err != nil {
			return nil, errdefs.FailedPrecondition("the sandbox has neither bash nor sh")
		}
	}
	sess := &session{
		m: m, id: req.ID, acct: plan.acct, shellPath: shellPath, env: plan.env, dir: plan.dir,
		createdAt: time.Now(), slot: make(chan struct{}, 1),
		defaultTimeout: time.Duration(req.DefaultTimeoutMs) * time.Millisecond,
	}
	if sess.id == "" {
		sess.id = newID()
	}
	m.mu.Lock()
	if _, ok := m.sessions[sess.id]; ok {
		m.mu.Unlock()
		return nil, errdefs.AlreadyExists("a session with id %q already exists", sess.id)
	}
	if len(m.sessions) >= maxSessions {
		m.mu.Unlock()
		return nil, errdefs.ResourceExhausted("too many sessions (at most %d)", maxSessions)
	}
	m.sessions[sess.id] = sess
	m.mu.Unlock()
	// Start the shell now, so a broken shell is reported here.
	if _, _, _, err := sess.ensureShell(); err != nil {
		m.mu.Lock()
		delete(m.sessions, sess.id)
		m.mu.Unlock()
		return nil, err
	}
	return sess, nil
}

func (m *procManager) handleListSessions(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	all := make([]*session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].createdAt.Before(all[j].createdAt) })
	res := api.SessionList{Sessions: []api.SessionInfo{}}
	for _, s := range all {
		res.Sessions = append(res.Sessions, s.info())
	}
	httpio.WriteJSON(w, http.StatusOK, res)
}

func (m *procManager) handleGetSession(w http.ResponseWriter, r *http.Request) {
	sess, err := m.session(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusOK, sess.info())
}

// handleDeleteSession removes the session, kills the background processes
// started in it (SIGTERM, grace, SIGKILL) and the shell's whole tree.
func (m *procManager) handleDeleteSession(w http.ResponseWriter, r *http.Request) {
	grace, err := parseGrace(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	id := r.PathValue("id")
	m.mu.Lock()
	sess := m.sessions[id]
	delete(m.sessions, id)
	m.mu.Unlock()
	if sess == nil {
		httpio.WriteError(w, errdefs.NotFound("no session %q", id))
		return
	}
	sess.mu.Lock()
	sess.deleted = true
	sh := sess.sh
	sess.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.killAll(id, grace)
		if sh != nil {
			sh.kill()
			<-sh.exited
		}
	}()
	select {
	case <-done:
		w.WriteHeader(http.StatusNoContent)
	case <-r.Context().Done():
	}
}

func (m *procManager) handleSessionExec(w http.ResponseWriter, r *http.Request) {
	sess, err := m.session(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	var req api.ExecRequest
	if err := httpio.DecodeJSON(w, r, maxExecBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	c, err := sess.command(&req)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	quit := make(chan struct{})
	defer close(quit)
	run, err := sess.run(r.Context(), c, quit)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	fs := startFrames(w)
	hbEvery := m.s.cfg.HeartbeatInterval
	hb := time.NewTimer(hbEvery)
	defer hb.Stop()
	for {
		select {
		case ch, ok := <-run.out:
			if !ok {
				if run.err != nil {
					fs.sendJSON(wire.Error, api.ErrorBody(run.err))
				} else {
					fs.sendJSON(wire.Exit, run.result)
				}
				return
			}
			if !fs.send(ch.t, ch.p, len(run.out) == 0) {
				return // quit (deferred) and the request context stop the command
			}
			hb.Reset(hbEvery)
		case <-hb.C:
			if !fs.send(wire.Heartbeat, nil, true) {
				return
			}
			hb.Reset(hbEvery)
		}
	}
}

// command validates an exec request for a session.
func (sess *session) command(req *api.ExecRequest) (shellCommand, error) {
	c := shellCommand{text: req.Command, env: req.Env, stdin: req.Stdin}
	if len(req.Argv) > 0 {
		if req.Command != "" {
			return c, errdefs.InvalidArgument("exactly one of argv and command must be set")
		}
		q := make([]string, len(req.Argv))
		for i, a := range req.Argv {
			q[i] = child.ShellQuote(a)
		}
		c.text = strings.Join(q, " ")
	}
	if strings.TrimSpace(c.text) == "" {
		return c, errdefs.InvalidArgument("command is empty")
	}
	if strings.IndexByte(c.text, 0) >= 0 {
		return c, errdefs.InvalidArgument("command contains a NUL byte")
	}
	if req.User != "" && req.User != sess.acct.name {
		return c, errdefs.InvalidArgument("session %s runs as %s; user %q cannot be chosen per command", sess.id, sess.acct.name, req.User)
	}
	if err := checkSessionEnv(req.Env); err != nil {
		return c, err
	}
	if req.Cwd != "" {
		if err := fspath.Check(req.Cwd); err != nil {
			return c, err
		}
		c.cwd = req.Cwd // relative to the session's cwd, as in a shell
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > child.MaxTimeoutMs {
		return c, errdefs.InvalidArgument("timeoutMs %d out of range [0, %d]", req.TimeoutMs, int64(child.MaxTimeoutMs))
	}
	c.timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	if c.timeout == 0 {
		sess.mu.Lock()
		c.timeout = sess.defaultTimeout // the session's default, 0: none
		sess.mu.Unlock()
	}
	return c, nil
}

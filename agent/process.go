package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Background process limits.
const (
	defaultLogBuffer = 1 << 20
	maxLogBuffer     = 64 << 20
	// DefaultKillGrace is how long a killed process tree has between
	// SIGTERM and SIGKILL.
	DefaultKillGrace = 5 * time.Second
	maxKillGrace     = time.Minute
	// maxProcesses bounds the process table; finished processes (and
	// their logs) are evicted oldest first to make room.
	maxProcesses   = 512
	maxCommandBody = 1 << 20
)

// validID is what a caller-chosen process or session id may look like: it
// lands in URLs and log lines, so no separators or control characters.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// procManager owns the background processes and shell sessions of one
// Server. It hangs off the route closures rather than the Server struct so
// that it stays in its own files.
type procManager struct {
	s *Server

	mu       sync.Mutex
	procs    map[string]*process
	sessions map[string]*session
}

// registerProcessRoutes adds the process, session and git endpoints.
func (s *Server) registerProcessRoutes() {
	m := &procManager{s: s, procs: make(map[string]*process), sessions: make(map[string]*session)}
	s.procs = m
	s.mux.HandleFunc("POST /v1/processes", m.handleStart)
	s.mux.HandleFunc("GET /v1/processes", m.handleList)
	s.mux.HandleFunc("DELETE /v1/processes", m.handleKillAll)
	s.mux.HandleFunc("GET /v1/processes/{id}", m.handleGet)
	s.mux.HandleFunc("DELETE /v1/processes/{id}", m.handleKill)
	s.mux.HandleFunc("GET /v1/processes/{id}/logs", m.handleLogs)
	s.mux.HandleFunc("POST /v1/processes/{id}/wait-log", m.handleWaitLog)
	s.mux.HandleFunc("POST /v1/processes/{id}/wait-port", m.handleWaitPort)
	s.mux.HandleFunc("POST /v1/processes/{id}/wait-exit", m.handleWaitExit)
	s.mux.HandleFunc("POST /v1/sessions", m.handleCreateSession)
	s.mux.HandleFunc("GET /v1/sessions", m.handleListSessions)
	s.mux.HandleFunc("GET /v1/sessions/{id}", m.handleGetSession)
	s.mux.HandleFunc("DELETE /v1/sessions/{id}", m.handleDeleteSession)
	s.mux.HandleFunc("PATCH /v1/sessions/{id}", m.handleUpdateSession)
	s.mux.HandleFunc("POST /v1/sessions/{id}/exec", m.handleSessionExec)
	s.mux.HandleFunc("POST /v1/git/checkout", m.handleGitCheckout)
}

// credentialFor returns the credential to run acct's commands with, or an
// error when the agent cannot switch to that user.
func credentialFor(acct account) (*syscall.Credential, error) {
	if os.Geteuid() == 0 {
		return &syscall.Credential{Uid: acct.uid, Gid: acct.gid, Groups: acct.groups}, nil
	}
	if acct.uid != uint32(os.Geteuid()) {
		return nil, errdefs.PermissionDenied("the agent is not root and cannot run commands as %s", acct.name)
	}
	return nil, nil
}

// process is one background process.
type process struct {
	id, command, sessionID, user, cwd string
	pid                               int
	startedAt                         time.Time

	mu       sync.Mutex
	ring     *logRing
	changed  chan struct{} // closed and replaced whenever output or state changes
	reaped   bool          // the main pid was reaped: never signal it again
	treeGone bool          // reaped, and no process of its group or their descendants runs
	treeDone chan struct{} // closed when treeGone is set
	ended    bool          // the tree is gone and its output drained
	exit     child.Exit
	endedAt  time.Time
	killed   bool   // a terminating kill was requested
	reason   string // why the agent killed it (timeout), if it did
	// treeSignal is the terminating signal the agent sent after the main
	// process had exited and that ended what was left of the tree
	// (SIGKILL after the grace period): the record's true end.
	treeSignal syscall.Signal
	known      []treeMember // the tree as a kill saw it
	// endWithMain: the record ends when the main process does (E2B's
	// semantics, api.StartProcessRequest.EndWithMain).
	endWithMain bool
	nudge       chan struct{} // a kill signalled the tree: check it soon
	done        chan struct{}
	timeoutT    *time.Timer
}

func (p *process) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *process) info() api.ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := api.ProcessInfo{
		ID: p.id, PID: p.pid, Command: p.command, Status: api.ProcessRunning,
		SessionID: p.sessionID, User: p.user, Cwd: p.cwd, StartedAt: p.startedAt,
	}
	if !p.ended {
		return in
	}
	t := p.endedAt
	in.EndedAt = &t
	switch {
	case p.exit.Lost:
		in.Status, in.Error = api.ProcessError, "the exit status of the process was lost"
		return in
	case p.killed:
		in.Status = api.ProcessKilled
	case p.exit.Status.ExitStatus() == 0 && !p.exit.Status.Signaled():
		in.Status = api.ProcessCompleted
	default:
		in.Status = api.ProcessFailed
	}
	es := child.ExitStatus(p.exit.Status)
	in.ExitCode, in.Signal, in.Error = &es.ExitCode, es.Signal, p.reason
	return in
}

// endedDescription is how a process that is no longer running is named in
// a "before it was ready" error.
func (p *process) endedDescription() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit.Lost {
		return "ended (its exit status was lost)"
	}
	es := child.ExitStatus(p.exit.Status)
	if es.Signal != "" {
		return "was killed by " + es.Signal
	}
	return "exited with code " + strconv.Itoa(es.ExitCode)
}

func (m *procManager) get(id string) (*process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.procs[id]
	if p == nil {
		return nil, errdefs.NotFound("no process %q", id)
	}
	return p, nil
}

// reserve adds p to the table, evicting the oldest finished processes when
// the table is full.
func (m *procManager) reserve(p *process) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.procs[p.id]; ok {
		return errdefs.AlreadyExists("a process with id %q already exists", p.id)
	}
	for len(m.procs) >= maxProcesses {
		var oldest *process
		for _, q := range m.procs {
			q.mu.Lock()
			ended := q.ended
			q.mu.Unlock()
			if ended && (oldest == nil || q.startedAt.Before(oldest.startedAt)) {
				oldest = q
			}
		}
		if oldest == nil {
			return errdefs.ResourceExhausted("too many background processes (%d running)", len(m.procs))
		}
		delete(m.procs, oldest.id)
	}
	m.procs[p.id] = p
	return nil
}

func (m *procManager) release(id string) {
	m.mu.Lock()
	delete(m.procs, id)
	m.mu.Unlock()
}

func (m *procManager) start(r *http.Request, req *api.StartProcessRequest) (*process, error) {
	if req.Command == "" {
		return nil, errdefs.InvalidArgument("command is empty")
	}
	if req.ID != "" && !validID.MatchString(req.ID) {
		return nil, errdefs.InvalidArgument("invalid process id %q: use letters, digits, '.', '_' and '-' (at most 128)", req.ID)
	}
	limit := req.LogBufferBytes
	if limit == 0 {
		limit = defaultLogBuffer
	}
	if limit < 1024 || limit > maxLogBuffer {
		return nil, errdefs.InvalidArgument("logBufferBytes %d out of range [1024, %d]", req.LogBufferBytes, maxLogBuffer)
	}
	ereq := api.ExecRequest{Command: execCommand(req.Command), Cwd: req.Cwd, Env: req.Env, User: req.User, TimeoutMs: req.TimeoutMs}
	if req.SessionID != "" {
		sess, err := m.session(req.SessionID)
		if err != nil {
			return nil, err
		}
		// The process starts where the session is: its cwd, its
		// exported variables and its user.
		cwd, env, err := sess.snapshot(r.Context())
		if err != nil {
			return nil, err
		}
		if ereq.Cwd == "" {
			ereq.Cwd = cwd
		}
		for k, v := range req.Env {
			env[k] = v
		}
		ereq.Env = env
		if ereq.User == "" {
			ereq.User = sess.acct.name
		}
	}
	plan, err := m.s.prepareExec(&ereq)
	if err != nil {
		return nil, err
	}
	cred, err := credentialFor(plan.acct)
	if err != nil {
		return nil, err
	}
	p := &process{
		id: req.ID, command: req.Command, sessionID: req.SessionID, user: plan.acct.name, cwd: plan.dir, endWithMain: req.EndWithMain,
		ring: newLogRing(limit), changed: make(chan struct{}), done: make(chan struct{}), treeDone: make(chan struct{}),
		nudge: make(chan struct{}, 1),
	}
	if p.id == "" {
		p.id = newID()
	}
	if err := m.reserve(p); err != nil {
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		m.release(p.id)
		return nil, errdefs.Internal("open %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		m.release(p.id)
		return nil, errdefs.ResourceExhausted("create pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		m.release(p.id)
		return nil, errdefs.ResourceExhausted("create pipe: %w", err)
	}
	attr := &syscall.ProcAttr{
		Dir:   plan.dir,
		Env:   plan.env,
		Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd()},
		// Own process group: the tree is signalled as a whole.
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}
	p.startedAt = time.Now()
	pid, exitCh, err := m.s.cfg.Reaper.Start(plan.argv0, plan.argv, attr)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		m.release(p.id)
		return nil, startError(plan, err)
	}
	p.pid = pid
	go p.run(exitCh, outR, errR)
	if plan.timeout > 0 {
		p.mu.Lock()
		p.timeoutT = time.AfterFunc(plan.timeout, func() {
			p.mu.Lock()
			if !p.treeGone {
				p.reason = "killed after its timeout of " + plan.timeout.String()
			}
			p.mu.Unlock()
			p.kill(syscall.SIGTERM, DefaultKillGrace)
		})
		p.mu.Unlock()
	}
	return p, nil
}

// run collects p's output until it exits and its pipes drain.
func (p *process) run(exitCh <-chan child.Exit, outR, errR *os.File) {
	defer outR.Close()
	defer errR.Close()
	var wg sync.WaitGroup
	collect := func(f *os.File, t wire.FrameType) {
		defer wg.Done()
		child.ReadPipe(f, func(c []byte) bool {
			p.mu.Lock()
			p.ring.add(t, c)
			p.notifyLocked()
			p.mu.Unlock()
			return true
		})
	}
	wg.Add(2)
	go collect(outR, wire.Stdout)
	go collect(errR, wire.Stderr)
	e := <-exitCh
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	// The record is the command, not the shell that ran it: it stays
	// running while anything of its process group (or their descendants,
	// or what a kill found of its tree) runs, such as a command the shell
	// forked that ignored the SIGTERM the shell died of, and ends with
	// what ended them. A descendant that left the group (setsid) and was
	// orphaned before any kill is not followed.
	for poll := treePollMin; !p.endWithMain && p.treeAlive(); poll = min(2*poll, treePollMax) {
		select {
		case <-time.After(poll):
		case <-p.nudge:
			poll = treePollMin // a kill is ending the tree: look soon
		}
	}
	p.mu.Lock()
	p.treeGone = true
	close(p.treeDone)
	if p.timeoutT != nil {
		p.timeoutT.Stop()
	}
	if p.treeSignal != 0 && !e.Lost && !(e.Status.Signaled() && e.Status.Signal() == syscall.SIGKILL) {
		// A wait status for "killed by treeSignal" (the signal number in
		// the low bits).
		e.Status = syscall.WaitStatus(p.treeSignal)
	}
	p.mu.Unlock()
	// Descendants that left the group and keep the pipes open (`setsid
	// server &`) must not keep the process from ending; their later
	// output is not collected.
	d := time.Now().Add(child.DrainDelay)
	outR.SetReadDeadline(d)
	errR.SetReadDeadline(d)
	wg.Wait()
	p.mu.Lock()
	p.ended, p.exit, p.endedAt = true, e, time.Now()
	p.notifyLocked()
	p.mu.Unlock()
	close(p.done)
}

// A process whose main pid exited is checked for the rest of its tree
// (a scan of /proc) at growing intervals: soon for the common short tail,
// rarely for a long-lived `server &`.
const (
	treePollMin = 10 * time.Millisecond
	treePollMax = 500 * time.Millisecond
)

func (m *procManager) handleStart(w http.ResponseWriter, r *http.Request) {
	var req api.StartProcessRequest
	if err := httpio.DecodeJSON(w, r, maxCommandBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	p, err := m.start(r, &req)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusCreated, p.info())
}

func (m *procManager) list(sessionID string) []*process {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*process
	for _, p := range m.procs {
		if sessionID == "" || p.sessionID == sessionID {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].startedAt.Before(out[j].startedAt) })
	return out
}

func (m *procManager) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	res := api.ProcessList{Processes: []api.ProcessInfo{}}
	for _, p := range m.list(q.Get("sessionId")) {
		in := p.info()
		if st := q.Get("status"); st == "" || st == in.Status {
			res.Processes = append(res.Processes, in)
		}
	}
	httpio.WriteJSON(w, http.StatusOK, res)
}

func (m *procManager) handleGet(w http.ResponseWriter, r *http.Request) {
	p, err := m.get(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusOK, p.info())
}

func (m *procManager) handleKill(w http.ResponseWriter, r *http.Request) {
	p, err := m.get(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	sig, err := parseSignal(r.URL.Query().Get("signal"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	grace, err := parseGrace(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	// The kill runs to completion even if the caller goes away: a tree
	// left SIGTERMed but never SIGKILLed would be a half-done kill.
	done := make(chan struct{})
	go func() { p.kill(sig, grace); close(done) }()
	select {
	case <-done:
	case <-r.Context().Done():
		return
	}
	httpio.WriteJSON(w, http.StatusOK, p.info())
}

// killAll kills every running process (of one session, when sessionID is
// set) in parallel and returns how many were running.
func (m *procManager) killAll(sessionID string, grace time.Duration) int {
	var wg sync.WaitGroup
	n := 0
	for _, p := range m.list(sessionID) {
		p.mu.Lock()
		running := !p.treeGone
		p.mu.Unlock()
		if !running {
			continue
		}
		n++
		wg.Add(1)
		go func() { defer wg.Done(); p.kill(syscall.SIGTERM, grace) }()
	}
	wg.Wait()
	return n
}

func (m *procManager) handleKillAll(w http.ResponseWriter, r *http.Request) {
	grace, err := parseGrace(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	n := m.killAll(r.URL.Query().Get("sessionId"), grace)
	httpio.WriteJSON(w, http.StatusOK, api.KillAllResult{Killed: n})
}

// handleLogs returns the buffered output as JSON, or with follow=1 streams
// it as frames: the buffered output, then live output, then exactly one
// exit (or error) frame once the process has ended.
func (m *procManager) handleLogs(w http.ResponseWriter, r *http.Request) {
	p, err := m.get(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	if f := r.URL.Query().Get("follow"); f != "1" && f != "true" {
		p.mu.Lock()
		out, errb := p.ring.contents()
		logs := api.ProcessLogs{ID: p.id, Stdout: out, Stderr: errb,
			DroppedStdout: p.ring.streams[0].dropped, DroppedStderr: p.ring.streams[1].dropped}
		p.mu.Unlock()
		httpio.WriteJSON(w, http.StatusOK, logs)
		return
	}
	fs := startFrames(w)
	hbEvery := m.s.cfg.HeartbeatInterval
	hb := time.NewTimer(hbEvery)
	defer hb.Stop()
	var after uint64
	for {
		p.mu.Lock()
		chunks := p.ring.since(after)
		ended, changed := p.ended, p.changed
		p.mu.Unlock()
		for i, c := range chunks {
			if !fs.send(c.t, c.p, i == len(chunks)-1) {
				return
			}
			after = c.seq
		}
		if len(chunks) > 0 {
			hb.Reset(hbEvery)
		}
		if ended {
			in := p.info()
			if in.Status == api.ProcessError {
				fs.sendJSON(wire.Error, api.ErrorBody(errdefs.Internal("process %s: %s", p.id, in.Error)))
				return
			}
			p.mu.Lock()
			es := child.ExitStatus(p.exit.Status)
			es.DurationMs = p.endedAt.Sub(p.startedAt).Milliseconds()
			p.mu.Unlock()
			fs.sendJSON(wire.Exit, es)
			return
		}
		select {
		case <-changed:
		case <-hb.C:
			if !fs.send(wire.Heartbeat, nil, true) {
				return
			}
			hb.Reset(hbEvery)
		case <-r.Context().Done():
			return
		}
	}
}

// frameStream writes a frame response (the exec wire format).
type frameStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startFrames(w http.ResponseWriter) *frameStream {
	fs := &frameStream{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", wire.ExecContentType)
	w.WriteHeader(http.StatusOK)
	fs.rc.Flush()
	return fs
}

func (fs *frameStream) send(t wire.FrameType, p []byte, flush bool) bool {
	fs.rc.SetWriteDeadline(time.Now().Add(httpio.WriteTimeout))
	if err := wire.WriteFrame(fs.w, t, p); err != nil {
		return false
	}
	if flush {
		return fs.rc.Flush() == nil
	}
	return true
}

func (fs *frameStream) sendJSON(t wire.FrameType, v any) bool {
	body, _ := json.Marshal(v)
	return fs.send(t, body, true)
}

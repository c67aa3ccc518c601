package terminal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	// DefaultScrollback is how much recent output a terminal keeps, to
	// replay to a client that attaches or reconnects.
	DefaultScrollback = 256 << 10
	// MaxTerminalMessage bounds one WebSocket message from a client (a
	// large paste); anything bigger closes that client.
	MaxTerminalMessage = 1 << 20
	// maxTerminals bounds terminals (running or exited) per sandbox: each
	// holds a shell and up to DefaultScrollback of memory in the agent,
	// whose RSS budget is small.
	maxTerminals   = 64
	maxTermID      = 128
	maxCols        = 1000
	maxRows        = 1000
	ptyReadChunk   = 16 << 10
	termTerm       = "xterm-256color"
	termKillWait   = 5 * time.Second
	defaultColumns = 80
	defaultRows    = 24
)

// Config is what terminals need from the agent.
type Config struct {
	// Prepare resolves a shell as an exec would.
	Prepare func(req *api.ExecRequest) (*child.Command, error)
	// Start starts a prepared command through the agent's reaper (the
	// agent is PID 1 and must own every wait status). Its error is already
	// an errdefs kind.
	Start func(c *child.Command, attr *syscall.ProcAttr) (pid int, exited <-chan child.Exit, err error)
}

// Terminals is the set of terminals of one agent.
type Terminals struct {
	cfg    Config
	mu     sync.Mutex
	m      map[string]*terminal
	closed bool
}

// New returns an empty set of terminals.
func New(cfg Config) *Terminals {
	return &Terminals{cfg: cfg, m: make(map[string]*terminal)}
}

// terminal is one shell on one pty.
type terminal struct {
	info    api.Terminal // immutable after start: ID, Shell, Cwd, User, Pid, CreatedAt
	master  *os.File
	exitCh  <-chan child.Exit
	outDone chan struct{} // the output pump ended
	done    chan struct{} // the shell was reaped and clients were told

	mu      sync.Mutex
	cols    int
	rows    int
	sb      []byte // scrollback, at most DefaultScrollback bytes
	clients map[*termClient]struct{}
	exit    *api.ExitStatus // set once the shell has exited
	reaped  bool
}

func validTermID(id string) error {
	if id == "" || len(id) > maxTermID || id == "." || id == ".." {
		return errdefs.InvalidArgument("terminal id must be 1 to %d characters", maxTermID)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return errdefs.InvalidArgument("terminal id %q may only hold letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

func checkSize(cols, rows int) error {
	if cols < 1 || cols > maxCols || rows < 1 || rows > maxRows {
		return errdefs.InvalidArgument("terminal size %dx%d out of range (1..%d columns, 1..%d rows)", cols, rows, maxCols, maxRows)
	}
	return nil
}

// create starts a terminal. An id that names a running terminal is
// AlreadyExists; one whose shell has exited is replaced (and its scrollback
// dropped).
func (ts *Terminals) create(req api.CreateTerminalRequest) (*terminal, error) {
	if req.ID == "" {
		var b [8]byte
		rand.Read(b[:])
		req.ID = hex.EncodeToString(b[:])
	}
	if err := validTermID(req.ID); err != nil {
		return nil, err
	}
	if req.Cols == 0 {
		req.Cols = defaultColumns
	}
	if req.Rows == 0 {
		req.Rows = defaultRows
	}
	if err := checkSize(req.Cols, req.Rows); err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return nil, errdefs.Unavailable("the agent is shutting down")
	}
	old := ts.m[req.ID]
	if old != nil && !old.ended() {
		return nil, errdefs.AlreadyExists("terminal %q already exists", req.ID)
	}
	if old == nil && len(ts.m) >= maxTerminals {
		return nil, errdefs.ResourceExhausted("too many terminals (limit %d); delete some", maxTerminals)
	}
	t, err := ts.start(req)
	if err != nil {
		return nil, err
	}
	ts.m[req.ID] = t
	return t, nil
}

func defaultShell() string {
	for _, sh := range []string{"/bin/bash", "/bin/sh"} {
		if fi, err := os.Stat(sh); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return sh
		}
	}
	return "/bin/sh"
}

// start opens a pty and starts the shell on it through the reaper (the
// agent is PID 1 and must own every wait status; see agent/reaper.go).
func (ts *Terminals) start(req api.CreateTerminalRequest) (*terminal, error) {
	shell := req.Shell
	if shell == "" {
		shell = defaultShell()
	}
	plan, err := ts.cfg.Prepare(&api.ExecRequest{Argv: []string{shell}, Cwd: req.Cwd, Env: req.Env, User: req.User})
	if err != nil {
		return nil, err
	}
	if _, ok := req.Env["TERM"]; !ok {
		plan.Env = setEnv(plan.Env, "TERM", termTerm)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: plan.UID, Gid: plan.GID, Groups: plan.Groups}
	} else if plan.UID != uint32(os.Geteuid()) {
		return nil, errdefs.PermissionDenied("the agent is not root and cannot start a terminal as %s", plan.User)
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, errdefs.ResourceExhausted("open a pty: %w", err)
	}
	defer tty.Close()
	master, err := pollable(ptmx)
	if err != nil {
		return nil, errdefs.Internal("pty: %w", err)
	}
	if err := setWinsize(master, req.Cols, req.Rows); err != nil {
		master.Close()
		return nil, errdefs.Internal("pty: set size: %w", err)
	}
	if cred != nil && plan.UID != 0 {
		// The user's own tools (tty, ssh-style reopen of /dev/pts/N,
		// write/mesg) expect to own their terminal, as login does.
		tty.Chown(int(plan.UID), int(plan.GID))
	}
	ttyFd := tty.Fd()
	attr := &syscall.ProcAttr{
		Dir:   plan.Dir,
		Env:   plan.Env,
		Files: []uintptr{ttyFd, ttyFd, ttyFd},
		// A new session whose controlling terminal is the pty: job
		// control, ^C and SIGWINCH on resize work as in a login shell.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: cred},
	}
	pid, exitCh, err := ts.cfg.Start(plan, attr)
	if err != nil {
		master.Close()
		return nil, err
	}
	t := &terminal{
		info: api.Terminal{
			ID: req.ID, Shell: plan.Argv0, Cwd: plan.Dir, User: plan.User,
			Pid: pid, CreatedAt: time.Now().UTC(),
		},
		master:  master,
		exitCh:  exitCh,
		outDone: make(chan struct{}),
		done:    make(chan struct{}),
		cols:    req.Cols,
		rows:    req.Rows,
		clients: make(map[*termClient]struct{}),
	}
	go t.pumpOutput()
	go t.wait()
	return t, nil
}

// setEnv replaces or adds k in a KEY=VALUE list.
func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// pollable re-opens the pty master in non-blocking mode under the runtime
// poller. pty.Open hands it back in blocking mode (it calls Fd()), where a
// Read can be neither interrupted by Close nor bounded by a deadline, so a
// background process that keeps the slave open would pin a goroutine forever.
func pollable(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// setWinsize sets the window size without calling Fd (which would put the
// master back into blocking mode). The kernel sends SIGWINCH to the
// terminal's foreground process group.
func setWinsize(f *os.File, cols, rows int) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = sc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	})
	if err != nil {
		return err
	}
	return ierr
}

func (t *terminal) ended() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// pumpOutput reads the shell's output into the scrollback and out to every
// client until the pty hangs up or the drain deadline after exit passes.
func (t *terminal) pumpOutput() {
	defer close(t.outDone)
	buf := make([]byte, ptyReadChunk)
	for {
		n, err := t.master.Read(buf)
		if n > 0 {
			t.output(buf[:n])
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// What the shell wrote before it exited is still
				// queued: forward it (see child.ReadPipe).
				for _, p := range child.DrainAvailable(t.master, buf) {
					t.output(p)
				}
			}
			return
		}
	}
}

func (t *terminal) output(p []byte) {
	msg := termMsg{typ: websocket.MessageBinary, p: append([]byte(nil), p...)}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sb = append(t.sb, p...)
	if over := len(t.sb) - DefaultScrollback; over > 0 {
		// Drop the oldest bytes. The backing array is reallocated by
		// append as the front is sliced off, so memory stays ~2× the cap.
		t.sb = t.sb[over:]
	}
	t.broadcastLocked(msg)
}

// wait waits for the shell, drains its last output, tells every client how
// it exited and closes them; the scrollback stays for later attaches.
func (t *terminal) wait() {
	e := <-t.exitCh
	t.mu.Lock()
	t.reaped = true
	t.mu.Unlock()
	// Background jobs may keep the slave open: forward what they write for
	// a moment (as exec does), then hang up.
	t.master.SetReadDeadline(time.Now().Add(child.DrainDelay))
	<-t.outDone
	st := api.ExitStatus{ExitCode: -1}
	if !e.Lost {
		st = child.ExitStatus(e.Status)
	}
	st.DurationMs = time.Since(t.info.CreatedAt).Milliseconds()
	msg := exitMsg(st)
	t.mu.Lock()
	t.exit = &st
	for c := range t.clients {
		t.queueLocked(c, msg) // drops c if it is too far behind
		t.dropLocked(c, closeExit)
	}
	t.mu.Unlock()
	t.master.Close()
	close(t.done)
}

// kill ends the shell and its whole tree, unless it was already reaped (its
// pid may then belong to someone else).
func (t *terminal) kill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reaped || len(t.exitCh) > 0 {
		return
	}
	child.KillTree(t.info.Pid)
}

func (t *terminal) snapshot() api.Terminal {
	t.mu.Lock()
	defer t.mu.Unlock()
	info := t.info
	info.Cols, info.Rows = t.cols, t.rows
	info.Running = t.exit == nil
	if t.exit != nil {
		st := *t.exit
		info.Exit = &st
	}
	info.Clients = len(t.clients)
	info.ScrollbackBytes = len(t.sb)
	return info
}

func (t *terminal) resize(cols, rows int) error {
	if err := checkSize(cols, rows); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit != nil {
		return errdefs.FailedPrecondition("the shell has exited")
	}
	if err := setWinsize(t.master, cols, rows); err != nil {
		return errdefs.Internal("resize: %w", err)
	}
	t.cols, t.rows = cols, rows
	return nil
}

func (ts *Terminals) get(id string) *terminal {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.m[id]
}

// CloseAll kills every terminal at agent shutdown.
func (ts *Terminals) CloseAll() {
	ts.mu.Lock()
	ts.closed = true
	all := make([]*terminal, 0, len(ts.m))
	for _, t := range ts.m {
		all = append(all, t)
	}
	ts.mu.Unlock()
	deadline := time.After(termKillWait)
	for _, t := range all {
		t.kill()
	}
	for _, t := range all {
		select {
		case <-t.done:
		case <-deadline:
			return
		}
	}
}

// HandleCreate serves POST /v1/terminals.
func (ts *Terminals) HandleCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateTerminalRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	t, err := ts.create(req)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusCreated, t.snapshot())
}

// HandleList serves GET /v1/terminals.
func (ts *Terminals) HandleList(w http.ResponseWriter, r *http.Request) {
	ts.mu.Lock()
	list := api.TerminalList{Terminals: make([]api.Terminal, 0, len(ts.m))}
	all := make([]*terminal, 0, len(ts.m))
	for _, t := range ts.m {
		all = append(all, t)
	}
	ts.mu.Unlock()
	for _, t := range all {
		list.Terminals = append(list.Terminals, t.snapshot())
	}
	sort.Slice(list.Terminals, func(i, j int) bool {
		a, b := list.Terminals[i], list.Terminals[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.ID < b.ID
	})
	httpio.WriteJSON(w, http.StatusOK, list)
}

// handleDelete kills a terminal's shell (and everything it started) and
// forgets the terminal and its scrollback.
// HandleDelete serves DELETE /v1/terminals/{id}.
func (ts *Terminals) HandleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validTermID(id); err != nil {
		httpio.WriteError(w, err)
		return
	}
	ts.mu.Lock()
	t := ts.m[id]
	delete(ts.m, id)
	ts.mu.Unlock()
	if t == nil {
		httpio.WriteError(w, errdefs.NotFound("terminal %q not found", id))
		return
	}
	t.kill()
	select {
	case <-t.done:
	case <-time.After(termKillWait):
		httpio.WriteError(w, errdefs.Internal("terminal %q: the shell did not exit after SIGKILL", id))
		return
	case <-r.Context().Done():
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleAttach upgrades to the terminal WebSocket. With create=1 a missing
// terminal (or one whose shell exited) is started first, sized from
// cols and rows, so a browser needs a single request.
// HandleAttach serves GET /v1/terminals/{id}/ws.
func (ts *Terminals) HandleAttach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := validTermID(id); err != nil {
		httpio.WriteError(w, err)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		httpio.WriteJSON(w, http.StatusUpgradeRequired, api.Error{Code: "invalid_argument", Message: "this endpoint needs a WebSocket upgrade"})
		return
	}
	q := r.URL.Query()
	create := q.Get("create") == "1" || q.Get("create") == "true"
	t := ts.get(id)
	if t == nil || (create && t.ended()) {
		if !create {
			httpio.WriteError(w, errdefs.NotFound("terminal %q not found", id))
			return
		}
		req := api.CreateTerminalRequest{ID: id, Shell: q.Get("shell"), Cwd: q.Get("cwd"), User: q.Get("user")}
		var err error
		for name, dst := range map[string]*int{"cols": &req.Cols, "rows": &req.Rows} {
			if v := q.Get(name); v != "" {
				if *dst, err = strconv.Atoi(v); err != nil {
					httpio.WriteError(w, errdefs.InvalidArgument("%s %q is not a number", name, v))
					return
				}
			}
		}
		t, err = ts.create(req)
		if errdefs.IsKind(err, errdefs.ErrAlreadyExists) {
			t, err = ts.get(id), nil // a concurrent attach created it
		}
		if err != nil || t == nil {
			if err == nil {
				err = errdefs.NotFound("terminal %q not found", id)
			}
			httpio.WriteError(w, err)
			return
		}
	}
	ts.serveClient(w, r, t)
}

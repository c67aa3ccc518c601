package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The session shell protocol.
//
// A session is one long-lived shell (bash --norc --noprofile, else sh)
// whose stdin is a pipe only the agent writes. Each command is sent as
//
//	{ eval '<command>'
//	} <STDIN >'<out fifo>' 2>'<err fifo>' 3>&-; command printf '<token> %d\n' "$?" >&3
//
// Why this shape:
//   - eval of a single-quoted string: the command text is never parsed as
//     part of our wrapper, so no quoting, heredoc or trailing comment in it
//     can break out. It runs in the shell itself, so cd, export, functions
//     and aliases persist.
//   - STDIN is /dev/null (or a file holding the request's stdin): a command
//     that reads stdin (cat, read, ssh) must never consume the protocol.
//   - per-command FIFOs carry stdout and stderr separately and live, and
//     the agent sees the end of a command's output as EOF, so output without
//     a trailing newline is delivered as is; no in-band markers in the data.
//   - the exit status goes to fd 3, a pipe the command itself cannot see
//     (3>&-), tagged with a random token, so output cannot forge it.
//
// A shell that dies (exit, exec, set -e, a signal) is noticed through the
// reaper; the command that killed it ends with the shell's status and
// ShellExited, and the next command starts a new shell and says so.

// shell is one running session shell.
type shell struct {
	pid    int
	path   string
	stdin  *os.File
	status chan string // lines from fd 3; closed at EOF
	exited chan struct{}

	mu     sync.Mutex
	reaped bool
	exit   child.Exit
	diag   []byte // the tail of the shell's own stdout/stderr
}

const maxShellDiag = 2048

func (sess *session) startShell() (*shell, error) {
	cred, err := credentialFor(sess.acct)
	if err != nil {
		return nil, err
	}
	var pipes [6]*os.File // stdin R/W, status R/W, diag R/W
	for i := 0; i < 6; i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			for _, f := range pipes {
				if f != nil {
					f.Close()
				}
			}
			return nil, errdefs.ResourceExhausted("create pipe: %w", err)
		}
	}
	inR, inW, stR, stW, dgR, dgW := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]
	argv := []string{sess.shellPath}
	if filepath.Base(sess.shellPath) == "bash" {
		argv = append(argv, "--norc", "--noprofile")
	}
	attr := &syscall.ProcAttr{
		Dir:   sess.dir,
		Env:   sess.env,
		Files: []uintptr{inR.Fd(), dgW.Fd(), dgW.Fd(), stW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}
	pid, exitCh, err := sess.m.s.cfg.Reaper.Start(sess.shellPath, argv, attr)
	inR.Close()
	stW.Close()
	dgW.Close()
	if err != nil {
		inW.Close()
		stR.Close()
		dgR.Close()
		return nil, errdefs.Internal("start session shell %s: %w", sess.shellPath, err)
	}
	sh := &shell{pid: pid, path: sess.shellPath, stdin: inW, status: make(chan string, 4), exited: make(chan struct{})}
	go func() {
		e := <-exitCh
		sh.mu.Lock()
		sh.reaped, sh.exit = true, e
		sh.mu.Unlock()
		inW.Close()
		close(sh.exited)
	}()
	go func() {
		defer stR.Close()
		defer close(sh.status)
		sc := bufio.NewScanner(stR)
		for sc.Scan() {
			sh.status <- sc.Text()
		}
	}()
	go func() {
		defer dgR.Close()
		buf := make([]byte, 4096)
		for {
			n, err := dgR.Read(buf)
			if n > 0 {
				sh.mu.Lock()
				sh.diag = append(sh.diag, buf[:n]...)
				if len(sh.diag) > maxShellDiag {
					sh.diag = append([]byte(nil), sh.diag[len(sh.diag)-maxShellDiag:]...)
				}
				sh.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return sh, nil
}

func (sh *shell) alive() bool {
	select {
	case <-sh.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the shell's whole tree (its process group, which holds the
// session's background jobs, and every descendant), unless it was reaped.
func (sh *shell) kill() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.reaped {
		child.KillTree(sh.pid)
	}
}

// describeExit says how the shell ended, for notices.
func (sh *shell) describeExit() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.exit.Lost {
		return "its exit status was lost"
	}
	es := child.ExitStatus(sh.exit.Status)
	d := "exit code " + strconv.Itoa(es.ExitCode)
	if es.Signal != "" {
		d = "killed by " + es.Signal
	}
	if msg := strings.TrimSpace(string(sh.diag)); msg != "" {
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		d += "; it last said: " + msg
	}
	return d
}

// shellCommand is one command to run in a session.
type shellCommand struct {
	text    string
	cwd     string  // run in a subshell there (does not persist)
	env     api.Env // exported (or unset, for null) in a subshell (does not persist)
	stdin   []byte
	timeout time.Duration
}

// shellRun is a command in flight. out carries its output and is closed
// when the command is over; result and err are valid after that.
type shellRun struct {
	out    chan chunk
	result api.SessionExitStatus
	err    error
}

// run runs c in the session's shell. The session's command slot is held
// until the command is completely over, so commands run strictly in order.
// When ctx ends, the command is killed; quit stops output delivery (the
// consumer went away).
func (sess *session) run(ctx context.Context, c shellCommand, quit <-chan struct{}) (*shellRun, error) {
	select {
	case sess.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, errdefs.Unavailable("session %s: gave up waiting for the previous command: %w", sess.id, ctx.Err())
	}
	release := func() { <-sess.slot }
	sh, restarted, notice, err := sess.ensureShell()
	if err != nil {
		release()
		return nil, err
	}
	dir, err := os.MkdirTemp("", "berth-cmd-")
	if err != nil {
		release()
		return nil, errdefs.Internal("session %s: create command directory: %w", sess.id, err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	fail := func(err error) (*shellRun, error) {
		cleanup()
		release()
		return nil, err
	}
	// The directory stays root-only until the agent holds its FIFO ends,
	// and they are opened O_NOFOLLOW and checked to be FIFOs: a session
	// user who could swap a FIFO for a symlink to a root-only file before
	// the agent (root) opens it would get that file streamed back as the
	// command's output.
	chown := func(p string) error {
		if os.Geteuid() == 0 && sess.acct.uid != 0 {
			return os.Lchown(p, int(sess.acct.uid), int(sess.acct.gid))
		}
		return nil
	}
	stdin := os.DevNull
	if len(c.stdin) > 0 {
		stdin = filepath.Join(dir, "stdin")
		if err := os.WriteFile(stdin, c.stdin, 0o600); err != nil {
			return fail(errdefs.Internal("session %s: write stdin: %w", sess.id, err))
		}
	}
	// Readers are opened non-blocking (no writer yet), and the agent holds
	// a writer of its own until the status arrives: a FIFO with no writer
	// reads as EOF, which must not happen before the shell has opened it.
	var readers, writers [2]*os.File
	closeAll := func() {
		for _, f := range append(readers[:], writers[:]...) {
			if f != nil {
				f.Close()
			}
		}
	}
	for i, name := range []string{"out", "err"} {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			closeAll()
			return fail(errdefs.Internal("session %s: mkfifo: %w", sess.id, err))
		}
		const flags = syscall.O_NONBLOCK | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
		if readers[i], err = os.OpenFile(p, os.O_RDONLY|flags, 0); err == nil {
			writers[i], err = os.OpenFile(p, os.O_WRONLY|flags, 0)
		}
		if err == nil {
			var fi os.FileInfo
			if fi, err = readers[i].Stat(); err == nil && fi.Mode().Type() != os.ModeNamedPipe {
				err = fmt.Errorf("%s is not a FIFO", p)
			}
		}
		if err != nil {
			closeAll()
			return fail(errdefs.Internal("session %s: open fifo: %w", sess.id, err))
		}
	}
	for _, p := range []string{filepath.Join(dir, "out"), filepath.Join(dir, "err"), stdin, dir} {
		if p == os.DevNull {
			continue
		}
		if err := chown(p); err != nil {
			closeAll()
			return fail(errdefs.Internal("session %s: %w", sess.id, err))
		}
	}
	var body string
	if c.cwd != "" || len(c.env) > 0 {
		var b strings.Builder
		b.WriteString("(")
		if c.cwd != "" {
			b.WriteString(" cd -- " + child.ShellQuote(c.cwd) + " || exit 1\n")
		}
		b.WriteString(envScript(c.env))
		b.WriteString(" eval " + child.ShellQuote(c.text) + "\n)")
		body = b.String()
	} else {
		body = "eval " + child.ShellQuote(c.text)
	}
	var tok [16]byte
	rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	script := fmt.Sprintf("{ %s\n} <%s >%s 2>%s 3>&-; command printf '%s %%d %%s\\n' \"$?\" \"$PWD\" >&3\n",
		body, child.ShellQuote(stdin), child.ShellQuote(filepath.Join(dir, "out")), child.ShellQuote(filepath.Join(dir, "err")), token)

	before := shellChildren(sh.pid)
	start := time.Now()
	// The write happens in the background: a long command is larger than
	// the pipe buffer and the shell reads it as it parses.
	go func() {
		if _, err := sh.stdin.Write([]byte(script)); err != nil {
			sh.kill() // a shell that does not read its stdin is useless
		}
	}()

	run := &shellRun{out: make(chan chunk, 8)}
	run.result.Restarted, run.result.Notice = restarted, notice
	go func() {
		defer release()
		defer cleanup()
		defer close(run.out)
		var wg sync.WaitGroup
		wg.Add(2)
		go pump(readers[0], wire.Stdout, run.out, quit, &wg)
		go pump(readers[1], wire.Stderr, run.out, quit, &wg)
		var timeoutC <-chan time.Time
		if c.timeout > 0 {
			t := time.NewTimer(c.timeout)
			defer t.Stop()
			timeoutC = t.C
		}
		status, shellDied, timedOut := sess.await(ctx, sh, token, timeoutC, before)
		ended := time.Now()
		writers[0].Close()
		writers[1].Close()
		d := time.Now().Add(child.DrainDelay)
		readers[0].SetReadDeadline(d)
		readers[1].SetReadDeadline(d)
		wg.Wait()
		readers[0].Close()
		readers[1].Close()
		run.result.TimedOut = timedOut
		run.result.DurationMs = ended.Sub(start).Milliseconds()
		switch {
		case !shellDied:
			run.result.ExitCode = status
		default:
			sh.mu.Lock()
			e := sh.exit
			sh.mu.Unlock()
			if e.Lost {
				run.err = errdefs.Internal("session %s: the shell's exit status was lost", sess.id)
				return
			}
			es := child.ExitStatus(e.Status)
			run.result.ExitCode, run.result.Signal = es.ExitCode, es.Signal
			run.result.ShellExited = true
			run.result.Notice = strings.TrimSpace(run.result.Notice + " The command ended the session's shell (" +
				sh.describeExit() + "); the next command starts a new one.")
		}
	}()
	return run, nil
}

// await waits for the command's status line or the shell's death. When ctx
// ends or the timeout fires, it kills the processes the command started
// (children of the shell that were not there before), gives the shell a
// moment to report, and kills the shell if it does not.
func (sess *session) await(ctx context.Context, sh *shell, token string, timeoutC <-chan time.Time, before map[treeMember]bool) (code int, shellDied, timedOut bool) {
	stopped := false
	var grace <-chan time.Time
	st := sh.status
	for {
		select {
		case line, ok := <-st:
			if !ok {
				st = nil // only the shell's exit can end the command now
				continue
			}
			n, ok := sess.parseStatus(line, token)
			if !ok {
				continue // not ours (a command wrote to fd 3 another way)
			}
			return n, false, timedOut
		case <-sh.exited:
			// Drain a status written just before the shell exited.
			for line := range sh.status {
				if n, ok := sess.parseStatus(line, token); ok {
					return n, false, timedOut
				}
			}
			return 0, true, timedOut
		case <-timeoutC:
			timedOut = true
			timeoutC = nil
			if !stopped {
				stopped, grace = true, sess.stopCommand(sh, before)
			}
		case <-ctx.Done():
			if !stopped {
				stopped, grace = true, sess.stopCommand(sh, before)
			}
		case <-grace:
			// A builtin loop (while :; do :; done) has no child to
			// kill; only the shell itself can be stopped.
			grace = nil
			sh.kill()
		}
	}
}

// parseStatus reads a command's status line, "token code cwd", and records
// the shell's cwd after the command (see sessionCwd in filescope.go).
func (sess *session) parseStatus(line, token string) (int, bool) {
	tokn, rest, found := strings.Cut(line, " ")
	if !found || tokn != token {
		return 0, false
	}
	rc, cwd, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(rc)
	if err != nil {
		return 0, false
	}
	if strings.HasPrefix(cwd, "/") {
		sess.mu.Lock()
		sess.cwd = cwd
		sess.mu.Unlock()
	}
	return n, true
}

// stopCommand kills the trees of the shell's children that the current
// command started, and returns when to give up on the shell.
func (sess *session) stopCommand(sh *shell, before map[treeMember]bool) <-chan time.Time {
	sh.mu.Lock()
	if !sh.reaped {
		for m := range shellChildren(sh.pid) {
			if !before[m] && m.alive() {
				child.KillTree(m.pid)
			}
		}
	}
	sh.mu.Unlock()
	return time.After(time.Second)
}

// shellChildren returns the shell's direct children, pinned by start time.
// /proc/PID/task/PID/children is cheap; a full /proc scan is the fallback
// for kernels without CONFIG_PROC_CHILDREN. (A shell is single-threaded,
// so its main task's list is all of them.)
func shellChildren(pid int) map[treeMember]bool {
	var kids []int
	p := "/proc/" + strconv.Itoa(pid)
	if data, err := os.ReadFile(p + "/task/" + strconv.Itoa(pid) + "/children"); err == nil {
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				kids = append(kids, c)
			}
		}
	} else {
		kids = child.Children()[pid]
	}
	out := make(map[treeMember]bool)
	for _, c := range kids {
		if _, _, _, start, ok := procStatAll(c); ok {
			out[treeMember{c, start}] = true
		}
	}
	return out
}

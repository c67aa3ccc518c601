package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// execPlan is a validated exec request.
type execPlan struct {
	argv0   string
	argv    []string
	env     []string
	dir     string
	acct    account
	timeout time.Duration
}

func (s *Server) prepareExec(req *api.ExecRequest) (*execPlan, error) {
	if (len(req.Argv) > 0) == (req.Command != "") {
		return nil, errdefs.InvalidArgument("exactly one of argv and command must be set")
	}
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errdefs.InvalidArgument("argv contains a NUL byte")
		}
	}
	if len(req.Argv) > 0 && req.Argv[0] == "" {
		return nil, errdefs.InvalidArgument("argv[0] is empty")
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return nil, errdefs.InvalidArgument("command contains a NUL byte")
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > child.MaxTimeoutMs {
		return nil, errdefs.InvalidArgument("timeoutMs %d out of range [0, %d]", req.TimeoutMs, int64(child.MaxTimeoutMs))
	}
	acct, err := s.resolveUser(req.User)
	if err != nil {
		return nil, err
	}
	p := &execPlan{acct: acct, timeout: time.Duration(req.TimeoutMs) * time.Millisecond}

	env := make(map[string]string)
	for _, kv := range s.id.baseEnv() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	if env["PATH"] == "" {
		env["PATH"] = defaultPath
	}
	if env["LANG"] == "" {
		env["LANG"] = "C.UTF-8"
	}
	env["HOME"], env["USER"], env["LOGNAME"] = acct.home, acct.name, acct.name
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || (v != api.EnvUnset && strings.IndexByte(v, 0) >= 0) {
			return nil, errdefs.InvalidArgument("invalid environment variable %q", k)
		}
	}
	req.Env.ApplyTo(env) // null (api.EnvUnset) removes the variable
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.env = append(p.env, k+"="+env[k])
	}

	if req.Cwd == "" && s.cfg.DefaultCwd != "" {
		if fi, err := os.Stat(s.cfg.DefaultCwd); err == nil && fi.IsDir() {
			req.Cwd = s.cfg.DefaultCwd
		}
	}
	if req.Cwd == "" {
		p.dir = acct.home
		if fi, err := os.Stat(p.dir); err != nil || !fi.IsDir() {
			p.dir = "/" // e.g. nobody's /nonexistent
		}
	} else {
		if p.dir, err = fspath.Resolve(req.Cwd, acct.home); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(p.dir); err != nil || !fi.IsDir() {
			return nil, errdefs.InvalidArgument("working directory %s does not exist or is not a directory", p.dir)
		}
	}

	if req.Command != "" {
		p.argv0, p.argv = "/bin/sh", []string{"/bin/sh", "-c", req.Command}
	} else {
		p.argv = req.Argv
		if p.argv0, err = lookPath(req.Argv[0], env["PATH"], p.dir); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// lookPath finds an executable in the exec's PATH (not the agent's own, as
// os/exec.LookPath would).
func lookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		cand := filepath.Join(d, name)
		if !filepath.IsAbs(cand) {
			cand = filepath.Join(dir, cand)
		}
		if fi, err := os.Stat(cand); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return cand, nil
		}
	}
	return "", errdefs.NotFound("executable %q not found in PATH", name)
}

func startError(p *execPlan, err error) error {
	switch err {
	case syscall.ENOENT:
		return errdefs.NotFound("executable %s not found", p.argv0)
	case syscall.EACCES, syscall.EPERM:
		return errdefs.PermissionDenied("cannot execute %s as user %s: permission denied", p.argv0, p.acct.name)
	case syscall.ENOEXEC:
		return errdefs.InvalidArgument("%s is not in an executable format", p.argv0)
	case syscall.E2BIG:
		return errdefs.InvalidArgument("argument list too long")
	}
	return errdefs.Internal("start %s: %w", p.argv0, err)
}

type chunk struct {
	t wire.FrameType
	p []byte
}

// pump forwards f's output as chunks until EOF, the read deadline set at
// exit (after taking what the pipe still holds: see child.ReadPipe), or quit.
func pump(f *os.File, t wire.FrameType, out chan<- chunk, quit <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	child.ReadPipe(f, func(p []byte) bool {
		select {
		case out <- chunk{t, p}:
			return true
		case <-quit:
			return false
		}
	})
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	if err := httpio.DecodeJSON(w, r, maxExecBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	plan, err := s.prepareExec(&req)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: plan.acct.uid, Gid: plan.acct.gid, Groups: plan.acct.groups}
	} else if plan.acct.uid != uint32(os.Geteuid()) {
		httpio.WriteError(w, errdefs.PermissionDenied("the agent is not root and cannot run commands as %s", plan.acct.name))
		return
	}

	var pipes [6]*os.File // stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW
	for i := 0; i < 6; i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			for _, f := range pipes {
				if f != nil {
					f.Close()
				}
			}
			httpio.WriteError(w, errdefs.ResourceExhausted("create pipe: %w", err))
			return
		}
	}
	stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]
	defer stdinW.Close()
	defer stdoutR.Close()
	defer stderrR.Close()

	attr := &syscall.ProcAttr{
		Dir:   plan.dir,
		Env:   plan.env,
		Files: []uintptr{stdinR.Fd(), stdoutW.Fd(), stderrW.Fd()},
		// Own process group, so a timeout or disconnect can kill the
		// command and everything it spawned in one signal.
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: cred},
	}
	start := time.Now()
	pid, exitCh, err := s.cfg.Reaper.Start(plan.argv0, plan.argv, attr)
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		httpio.WriteError(w, startError(plan, err))
		return
	}

	// Kill the whole tree on timeout or when the host goes away, but
	// never after the command was reaped: its pid may then be reused.
	var timedOut atomic.Bool
	var killMu sync.Mutex
	reaped := false
	killIfRunning := func(timeout bool) {
		killMu.Lock()
		defer killMu.Unlock()
		if reaped || len(exitCh) > 0 {
			return
		}
		if timeout {
			timedOut.Store(true)
		}
		child.KillTree(pid)
	}
	kill := func() { killIfRunning(false) }
	if plan.timeout > 0 {
		t := time.AfterFunc(plan.timeout, func() { killIfRunning(true) })
		defer t.Stop()
	}
	defer context.AfterFunc(r.Context(), kill)()

	go func() {
		if len(req.Stdin) > 0 {
			stdinW.Write(req.Stdin) // EPIPE if the command ignores stdin
		}
		stdinW.Close()
	}()

	out := make(chan chunk, 8)
	quit := make(chan struct{})
	defer close(quit)
	var wg sync.WaitGroup
	wg.Add(2)
	go pump(stdoutR, wire.Stdout, out, quit, &wg)
	go pump(stderrR, wire.Stderr, out, quit, &wg)
	go func() { wg.Wait(); close(out) }()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", wire.ExecContentType)
	w.WriteHeader(http.StatusOK)
	rc.Flush()

	send := func(t wire.FrameType, p []byte, flush bool) bool {
		rc.SetWriteDeadline(time.Now().Add(httpio.WriteTimeout))
		if err := wire.WriteFrame(w, t, p); err != nil {
			return false
		}
		if flush {
			return rc.Flush() == nil
		}
		return true
	}
	heartbeatEvery := s.cfg.HeartbeatInterval
	hb := time.NewTimer(heartbeatEvery)
	defer hb.Stop()
	var status *child.Exit
	var exitedAt time.Time
	waitCh := exitCh
	outCh := (<-chan chunk)(out)
	for outCh != nil || status == nil {
		select {
		case c, ok := <-outCh:
			if !ok {
				outCh = nil
				continue
			}
			if !send(c.t, c.p, len(outCh) == 0) {
				kill()
				return
			}
			hb.Reset(heartbeatEvery)
		case e := <-waitCh:
			killMu.Lock()
			reaped = true
			killMu.Unlock()
			status, waitCh, exitedAt = &e, nil, time.Now()
			d := time.Now().Add(child.DrainDelay)
			stdoutR.SetReadDeadline(d)
			stderrR.SetReadDeadline(d)
			stdinW.Close()
		case <-hb.C:
			if !send(wire.Heartbeat, nil, true) {
				kill()
				return
			}
			hb.Reset(heartbeatEvery)
		case <-r.Context().Done():
			return // the AfterFunc above killed the tree
		}
	}
	if status.Lost {
		body, _ := json.Marshal(api.ErrorBody(errdefs.Internal("the exit status of %s was lost", plan.argv0)))
		send(wire.Error, body, true)
		return
	}
	es := child.ExitStatus(status.Status)
	es.TimedOut = timedOut.Load()
	es.DurationMs = exitedAt.Sub(start).Milliseconds()
	body, _ := json.Marshal(es)
	send(wire.Exit, body, true)
}

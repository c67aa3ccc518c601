package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	pb "github.com/berth-sh/berth/e2b/envdpb/process"
	"github.com/berth-sh/berth/internal/errdefs"
)

// processService is envd's process.Process over berth's agent: commands
// are agent background processes (ring-buffered output, so Connect replays
// it), PTYs are agent terminals.
type processService struct{ h *Handler }

// procEntry is one process started through the E2B API.
type procEntry struct {
	pid     uint32
	agentID string // agent process or terminal id
	pty     bool
	tag     string
	config  *pb.ProcessConfig
	fifo    string // stdin FIFO, when started with stdin

	mu    sync.Mutex
	input *ptyInput // PTY: the connection that carries input and resizes
}

// procTable remembers, per sandbox, the processes started through this API
// (their E2B config and tag); it is rebuilt empty after a daemon restart.
type procTable struct {
	mu sync.Mutex
	m  map[string]map[uint32]*procEntry
}

func newProcTable() *procTable { return &procTable{m: map[string]map[uint32]*procEntry{}} }

func (t *procTable) add(sandbox string, e *procEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[sandbox] == nil {
		t.m[sandbox] = map[uint32]*procEntry{}
	}
	t.m[sandbox][e.pid] = e
}

func (t *procTable) remove(sandbox string, pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[sandbox][pid]; e != nil {
		e.closeInput()
	}
	delete(t.m[sandbox], pid)
}

func (t *procTable) forget(sandbox string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.m[sandbox] {
		e.closeInput()
	}
	delete(t.m, sandbox)
}

func (t *procTable) find(sandbox string, sel *pb.ProcessSelector) (*procEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sel == nil {
		return nil, errdefs.InvalidArgument("process selector is required")
	}
	switch s := sel.Selector.(type) {
	case *pb.ProcessSelector_Pid:
		if e := t.m[sandbox][s.Pid]; e != nil {
			return e, nil
		}
		return nil, errdefs.NotFound("process with pid %d not found", s.Pid)
	case *pb.ProcessSelector_Tag:
		for _, e := range t.m[sandbox] {
			if e.tag == s.Tag {
				return e, nil
			}
		}
		return nil, errdefs.NotFound("process with tag %q not found", s.Tag)
	}
	return nil, errdefs.InvalidArgument("process selector needs a pid or a tag")
}

func (t *procTable) list(sandbox string) []*procEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*procEntry, 0, len(t.m[sandbox]))
	for _, e := range t.m[sandbox] {
		out = append(out, e)
	}
	return out
}

func randID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(cmd string, args []string) string {
	parts := []string{shellQuote(cmd)}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// eventSender serializes sends on one server stream (output, keepalives).
type eventSender struct {
	mu   sync.Mutex
	send func(*pb.ProcessEvent) error
	err  error
}

func (s *eventSender) event(ev *pb.ProcessEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.err = s.send(ev)
	return s.err
}

type dataWriter struct {
	s      *eventSender
	stderr bool
	pty    bool
}

func (w dataWriter) Write(p []byte) (int, error) {
	d := &pb.ProcessEvent_DataEvent{}
	b := append([]byte(nil), p...)
	switch {
	case w.pty:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	case w.stderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	}
	if err := w.s.event(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}); err != nil {
		return 0, err
	}
	return len(p), nil
}

func endEvent(es api.ExitStatus) *pb.ProcessEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(es.ExitCode), Exited: es.Signal == "", Status: fmt.Sprintf("exit status %d", es.ExitCode)}
	if es.Signal != "" {
		end.Status = "signal: " + strings.ToLower(strings.TrimPrefix(es.Signal, "SIG"))
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
}

func startEvent(pid uint32) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
}

// stream runs one Start or Connect stream: start{pid}, output, end, with
// keepalives at the client's interval; it ends with an error when the
// sandbox is killed or paused.
func (s *processService) stream(ctx context.Context, hdr http.Header, send func(*pb.ProcessEvent) error,
	body func(ctx context.Context, es *eventSender) (*pb.ProcessEvent, error)) error {
	id := sandboxFrom(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer s.h.register(id, cancel)()
	es := &eventSender{send: send}
	interval := keepaliveInterval(hdr)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if es.event(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}) != nil {
					cancel(errors.New("client gone"))
					return
				}
			}
		}
	}()
	end, err := body(ctx, es)
	if c := context.Cause(ctx); c != nil && errors.Is(c, errSandboxGone) {
		return c
	}
	if err != nil {
		if ctx.Err() == nil {
			s.h.opts.Logf("e2b: sandbox %s: process stream: %v", id, err)
		}
		return err
	}
	return es.event(end)
}

func (s *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], st *connect.ServerStream[pb.StartResponse]) error {
	id := sandboxFrom(ctx)
	cfg := req.Msg.Process
	if cfg == nil || cfg.Cmd == "" {
		return errdefs.InvalidArgument("process.cmd is required")
	}
	user, err := userFrom(req.Header().Get("Authorization"))
	if err != nil {
		return err
	}
	send := func(ev *pb.ProcessEvent) error { return st.Send(&pb.StartResponse{Event: ev}) }
	if req.Msg.Pty != nil {
		return s.startPTY(ctx, req, user, send)
	}
	// No cwd: the agent's default, as envd's: the image's WORKDIR (a
	// template's setWorkdir) when it has one, else the user's home.
	cwd := ""
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = resolvePath(*cfg.Cwd)
	}
	e := &procEntry{agentID: randID("e2b-"), config: cfg}
	if req.Msg.Tag != nil {
		e.tag = *req.Msg.Tag
	}
	cmdline := "exec " + shellJoin(cfg.Cmd, cfg.Args)
	if req.Msg.Stdin != nil && *req.Msg.Stdin {
		// stdin is a FIFO. Before the command starts, a child (sleep)
		// inherits a read-write descriptor of it, so the FIFO has a writer
		// until CloseStdin kills that child: each SendInput opens, writes
		// and closes without the command seeing an early EOF.
		e.fifo = "/tmp/.e2b-stdin-" + e.agentID
		cmdline = fmt.Sprintf("mkfifo -m 600 %[1]s && exec 3<>%[1]s && { sleep 2147483647 </dev/null >/dev/null 2>&1 & echo $! > %[1]s.pid; } && %[2]s < %[1]s 3<&-",
			e.fifo, cmdline)
	}
	return s.stream(ctx, req.Header(), send, func(ctx context.Context, es *eventSender) (*pb.ProcessEvent, error) {
		ag, release, err := s.h.agent(ctx, id)
		if err != nil {
			return nil, err
		}
		defer release()
		info, err := ag.StartProcess(ctx, api.StartProcessRequest{
			Command: cmdline, ID: e.agentID, Cwd: cwd, Env: cfg.Envs, User: user, LogBufferBytes: 64 << 20,
			EndWithMain: true, // envd's end is the command's exit
		})
		if err != nil {
			return nil, err
		}
		e.pid = uint32(info.PID)
		s.h.procs.add(id, e)
		if err := es.event(startEvent(e.pid)); err != nil {
			return nil, err
		}
		return s.follow(ctx, ag, id, e, es)
	})
}

// follow streams a process's output until it ends. A stream that ends
// first (client gone, Connect-Timeout-Ms) leaves the process running and
// listed, so commands.connect can pick it up again, as with envd.
func (s *processService) follow(ctx context.Context, ag *agentclient.Client, id string, e *procEntry, es *eventSender) (*pb.ProcessEvent, error) {
	exit, err := ag.StreamProcessLogs(ctx, e.agentID, dataWriter{s: es}, dataWriter{s: es, stderr: true})
	if err != nil {
		return nil, err
	}
	s.h.procs.remove(id, e.pid)
	s.cleanupStdin(context.WithoutCancel(ctx), ag, e)
	return endEvent(exit), nil
}

// fifoReady waits (up to 5 s) until the command has made its stdin FIFO
// and started the holder, which it records last.
func fifoReady(fifo string) string {
	return fmt.Sprintf("i=0; while [ ! -s %[1]s.pid ]; do i=$((i+1)); [ $i -gt 500 ] && exit 3; sleep 0.01; done; ", fifo)
}

// cleanupStdin ends the FIFO's holder (if CloseStdin did not) and removes
// the FIFO of a process started with stdin.
func (s *processService) cleanupStdin(ctx context.Context, ag *agentclient.Client, e *procEntry) {
	if e.fifo == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	script := fmt.Sprintf("[ -f %[1]s.pid ] && kill -KILL \"$(cat %[1]s.pid)\" 2>/dev/null; rm -f %[1]s %[1]s.pid", e.fifo)
	_, _ = ag.Exec(ctx, api.ExecRequest{Command: script, User: defaultUser, TimeoutMs: 5000}, nil, nil)
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], st *connect.ServerStream[pb.ConnectResponse]) error {
	id := sandboxFrom(ctx)
	e, err := s.h.procs.find(id, req.Msg.Process)
	if err != nil {
		return err
	}
	send := func(ev *pb.ProcessEvent) error { return st.Send(&pb.ConnectResponse{Event: ev}) }
	if e.pty {
		return s.connectPTY(ctx, req.Header(), e, send)
	}
	return s.stream(ctx, req.Header(), send, func(ctx context.Context, es *eventSender) (*pb.ProcessEvent, error) {
		ag, release, err := s.h.agent(ctx, id)
		if err != nil {
			return nil, err
		}
		defer release()
		if err := es.event(startEvent(e.pid)); err != nil {
			return nil, err
		}
		return s.follow(ctx, ag, id, e, es)
	})
}

func (s *processService) List(ctx context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	id := sandboxFrom(ctx)
	if err := s.prune(ctx, id); err != nil {
		return nil, err
	}
	out := &pb.ListResponse{}
	for _, e := range s.h.procs.list(id) {
		pi := &pb.ProcessInfo{Config: e.config, Pid: e.pid}
		if e.tag != "" {
			pi.Tag = &e.tag
		}
		out.Processes = append(out.Processes, pi)
	}
	return connect.NewResponse(out), nil
}

// prune drops table entries whose process or terminal has ended while no
// stream was following it.
func (s *processService) prune(ctx context.Context, id string) error {
	ag, release, err := s.h.agent(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	procs, err := ag.ListProcesses(ctx, "")
	if err != nil {
		return err
	}
	terms, err := ag.ListTerminals(ctx)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, p := range procs {
		running[p.ID] = p.Status == api.ProcessRunning
	}
	for _, t := range terms {
		running[t.ID] = t.Running
	}
	for _, e := range s.h.procs.list(id) {
		if !running[e.agentID] {
			s.h.procs.remove(id, e.pid)
			if e.fifo != "" {
				s.cleanupStdin(context.WithoutCancel(ctx), ag, e)
			}
		}
	}
	return nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	id := sandboxFrom(ctx)
	e, err := s.h.procs.find(id, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if req.Msg.Input == nil {
		return nil, errdefs.InvalidArgument("input is required")
	}
	ag, release, err := s.h.agent(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	switch in := req.Msg.Input.Input.(type) {
	case *pb.ProcessInput_Pty:
		if !e.pty {
			return nil, errdefs.FailedPrecondition("process %d has no PTY", e.pid)
		}
		if err := s.ptyInput(ctx, ag, e, in.Pty, nil); err != nil {
			return nil, err
		}
	case *pb.ProcessInput_Stdin:
		if e.pty {
			if err := s.ptyInput(ctx, ag, e, in.Stdin, nil); err != nil {
				return nil, err
			}
			break
		}
		if e.fifo == "" {
			return nil, errdefs.FailedPrecondition("process %d was started without stdin", e.pid)
		}
		// The holder keeps the FIFO's write end open; each write opens it
		// again, so a closed stdin (holder gone, reader gone) fails fast.
		es, err := ag.Exec(ctx, api.ExecRequest{Command: fifoReady(e.fifo) + "exec cat > " + e.fifo, User: defaultUser, Stdin: in.Stdin, TimeoutMs: 10000}, nil, nil)
		if err != nil {
			return nil, err
		}
		if es.ExitCode != 0 {
			return nil, errdefs.FailedPrecondition("stdin of process %d is closed", e.pid)
		}
	default:
		return nil, errdefs.InvalidArgument("input needs stdin or pty bytes")
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	id := sandboxFrom(ctx)
	e, err := s.h.procs.find(id, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if e.pty || e.fifo == "" {
		return nil, errdefs.FailedPrecondition("process %d has no stdin to close", e.pid)
	}
	ag, release, err := s.h.agent(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	script := fifoReady(e.fifo) + fmt.Sprintf("kill -KILL \"$(cat %[1]s.pid)\"", e.fifo)
	es, err := ag.Exec(ctx, api.ExecRequest{Command: script, User: defaultUser, TimeoutMs: 5000}, nil, nil)
	if err != nil {
		return nil, err
	}
	if es.ExitCode != 0 {
		return nil, errdefs.FailedPrecondition("stdin of process %d is already closed", e.pid)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	id := sandboxFrom(ctx)
	e, err := s.h.procs.find(id, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	ag, release, err := s.h.agent(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	opts := agentclient.KillOptions{Signal: "KILL", Grace: -1}
	switch req.Msg.Signal {
	case pb.Signal_SIGNAL_SIGKILL:
	case pb.Signal_SIGNAL_SIGTERM:
		opts = agentclient.KillOptions{Signal: "TERM"}
	default:
		return nil, errdefs.InvalidArgument("signal %v is not supported: use SIGTERM or SIGKILL", req.Msg.Signal)
	}
	if e.pty {
		err = ag.DeleteTerminal(ctx, e.agentID)
	} else {
		_, err = ag.KillProcess(ctx, e.agentID, opts)
	}
	if err != nil {
		return nil, err
	}
	if e.pty || opts.Signal == "KILL" {
		s.h.procs.remove(id, e.pid) // dead now, whether or not a stream follows it
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	id := sandboxFrom(ctx)
	e, err := s.h.procs.find(id, req.Msg.Process)
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil || req.Msg.Pty.Size == nil {
		return connect.NewResponse(&pb.UpdateResponse{}), nil
	}
	if !e.pty {
		return nil, errdefs.FailedPrecondition("process %d has no PTY", e.pid)
	}
	ag, release, err := s.h.agent(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	size := req.Msg.Pty.Size
	if err := s.ptyInput(ctx, ag, e, nil, &api.TerminalControl{Type: api.TerminalResize, Cols: int(size.Cols), Rows: int(size.Rows)}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

func (s *processService) StreamInput(context.Context, *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("StreamInput is not supported by berth: use SendInput"))
}

// userFrom reads the user of "Authorization: Basic base64(user:)"; berth
// runs E2B commands as "user" unless root is asked for.
func userFrom(auth string) (string, error) {
	if auth == "" {
		return defaultUser, nil
	}
	const prefix = "basic "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return defaultUser, nil
	}
	raw, err := decodeB64(strings.TrimSpace(auth[len(prefix):]))
	if err != nil {
		return "", errdefs.Unauthenticated("invalid Authorization header")
	}
	u, _, _ := strings.Cut(raw, ":")
	if u == "" {
		return defaultUser, nil
	}
	if err := checkUser(u); err != nil {
		return "", err
	}
	return u, nil
}

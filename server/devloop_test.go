package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// devEnv is the server in front of a real in-process agent, reached through
// a unix-socket relay the test can cut to play a dying agent.
type devEnv struct {
	ts     *httptest.Server
	f      *fakeBackend
	ag     *agenttest.Agent
	relay  *cutRelay
	active atomic.Int64 // agents handed out and not yet released
}

func newDevEnv(t *testing.T) *devEnv {
	t.Helper()
	e := &devEnv{ag: agenttest.Start(t), f: newFake()}
	e.relay = newCutRelay(t, e.ag.Socket)
	cl := agentclient.New(e.relay.path)
	t.Cleanup(cl.Close)
	e.f.agentFn = func(ctx context.Context, name string) (*agentclient.Client, func(), error) {
		if name != "dev" {
			return nil, nil, errdefs.NotFound("sandbox %q not found", name)
		}
		e.active.Add(1)
		var once sync.Once
		return cl, func() { once.Do(func() { e.active.Add(-1) }) }, nil
	}
	e.ts = newTestServer(t, e.f, func(s *server) { s.pingInterval = 100 * time.Millisecond })
	return e
}

// waitReleased fails unless every agent handed out is released soon. The
// bound is generous: it only has to catch "never".
func (e *devEnv) waitReleased(t *testing.T) {
	t.Helper()
	eventually(t, "agent released", func() bool { return e.active.Load() == 0 })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *devEnv) json(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	r := do(t, e.ts, method, "/v1/sandboxes/dev"+path, rd)
	if r.status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, r.body)
		}
	}
}

// cutRelay forwards unix-socket connections to the agent; cut drops them
// all, which is what the host sees when a sandbox's agent dies.
type cutRelay struct {
	path  string
	mu    sync.Mutex
	conns []net.Conn
}

func newCutRelay(t *testing.T, target string) *cutRelay {
	dir, err := os.MkdirTemp("", "relay")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &cutRelay{path: filepath.Join(dir, "s")}
	ln, err := net.Listen("unix", r.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); r.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
	return r
}

func (r *cutRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// sseReader reads events one at a time, skipping pings.
type sseReader struct {
	t  *testing.T
	br *bufio.Reader
}

func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			s.t.Errorf("unexpected SSE line %q", line)
		}
	}
}

func (e *devEnv) openStream(t *testing.T, ctx context.Context, path string, hdr ...string) (*http.Response, *sseReader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/v1/sandboxes/dev"+path, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res, &sseReader{t: t, br: bufio.NewReader(res.Body)}
}

// collectExec folds a whole exec-style event stream: output per stream, and
// the names of the terminal events.
func collectExec(t *testing.T, events []sseEvent) (stdout, stderr string, terminal []api.ExecEvent) {
	t.Helper()
	for _, ev := range events {
		var e api.ExecEvent
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil || e.Type != ev.name {
			t.Fatalf("event %s: bad data %q (%v)", ev.name, ev.data, err)
		}
		switch ev.name {
		case "stdout":
			stdout += string(e.Data)
		case "stderr":
			stderr += string(e.Data)
		case "exit", "error":
			terminal = append(terminal, e)
		default:
			t.Fatalf("unexpected event %q", ev.name)
		}
	}
	return
}

func TestProcessLifecycle(t *testing.T) {
	e := newDevEnv(t)
	var info api.ProcessInfo
	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "p1", Command: "echo hello; echo oops >&2; sleep 0.2; echo done"}, 201, &info)
	if info.ID != "p1" || info.PID == 0 || info.Status != api.ProcessRunning {
		t.Fatalf("started %+v", info)
	}
	var list api.ProcessList
	e.json(t, "GET", "/processes", nil, 200, &list)
	if len(list.Processes) != 1 || list.Processes[0].ID != "p1" {
		t.Fatalf("list %+v", list)
	}

	// Followed logs: buffered output, live output, exactly one exit.
	r := do(t, e.ts, "GET", "/v1/sandboxes/dev/processes/p1/logs?follow=1", nil)
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("logs stream: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	events, _ := readSSE(t, strings.NewReader(string(r.body)))
	stdout, stderr, term := collectExec(t, events)
	if stdout != "hello\ndone\n" || stderr != "oops\n" {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	if len(term) != 1 || term[0].Type != "exit" || term[0].Exit == nil || term[0].Exit.ExitCode != 0 || events[len(events)-1].name != "exit" {
		t.Fatalf("terminal events %+v", term)
	}

	// Buffered logs as JSON.
	var logs api.ProcessLogs
	e.json(t, "GET", "/processes/p1/logs", nil, 200, &logs)
	if string(logs.Stdout) != "hello\ndone\n" || string(logs.Stderr) != "oops\n" {
		t.Fatalf("buffered logs %+v", logs)
	}
	e.json(t, "GET", "/processes/p1", nil, 200, &info)
	if info.Status != api.ProcessCompleted || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("after exit: %+v", info)
	}

	// Kill one, then kill all.
	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "p2", Command: "sleep 60"}, 201, nil)
	e.json(t, "DELETE", "/processes/p2?signal=TERM", nil, 200, &info)
	if info.Status != api.ProcessKilled || info.Signal == "" {
		t.Fatalf("killed: %+v", info)
	}
	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "p3", Command: "sleep 60"}, 201, nil)
	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "p4", Command: "sleep 60"}, 201, nil)
	var ka api.KillAllResult
	e.json(t, "DELETE", "/processes?graceMs=0", nil, 200, &ka)
	if ka.Killed != 2 {
		t.Fatalf("kill all: %+v", ka)
	}

	// Errors keep their kinds, and a stream that cannot start is JSON.
	r = do(t, e.ts, "GET", "/v1/sandboxes/dev/processes/nope/logs", nil, "Accept", "text/event-stream")
	if r.status != 404 || r.apiError(t).Code != "not_found" {
		t.Fatalf("missing process logs: %d %s", r.status, r.body)
	}
	r = do(t, e.ts, "GET", "/v1/sandboxes/other/processes", nil)
	if r.status != 404 {
		t.Fatalf("missing sandbox: %d %s", r.status, r.body)
	}
	e.waitReleased(t)
}

func TestProcessValidationNeverWakes(t *testing.T) {
	e := newDevEnv(t)
	cases := []struct{ method, path, body string }{
		{"POST", "/processes", `{"command":""}`},
		{"POST", "/processes", `{"command":"x","bogus":1}`},
		{"POST", "/processes", `{"command":"x","id":"../etc"}`},
		{"POST", "/processes", `{"command":"x","logBufferBytes":1}`},
		{"GET", "/processes/..%2fx", ""},
		{"GET", "/processes?sessionId=a%20b", ""},
		{"DELETE", "/processes/p?signal=TERM%3Brm", ""},
		{"DELETE", "/processes/p?graceMs=-1", ""},
		{"POST", "/processes/p/wait-log", `{"pattern":"("  ,"regex":true}`},
		{"POST", "/processes/p/wait-port", `{"port":70000}`},
		{"POST", "/processes/p/wait-port", `{"port":80,"mode":"udp"}`},
		{"POST", "/git/checkout", `{"url":"--upload-pack=touch /tmp/pwned"}`},
		{"POST", "/git/checkout", `{"url":"https://x/y","branch":"-b"}`},
		{"POST", "/terminals", `{"id":"a/b"}`},
		{"POST", "/terminals", `{"cols":100000}`},
		{"GET", "/terminals/t/ws?cols=x", ""},
		{"GET", "/watch", ""},
		{"GET", "/watch?path=/tmp&include=a&exclude=b", ""},
		{"GET", "/watch?path=/tmp&include=[", ""},
	}
	for _, c := range cases {
		before := e.f.calls.Load()
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		r := do(t, e.ts, c.method, "/v1/sandboxes/dev"+c.path, body)
		if r.status != 400 || r.apiError(t).Code != "invalid_argument" {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, r.status, r.body)
		}
		if n := e.f.calls.Load() - before; n != 0 {
			t.Errorf("%s %s: the backend was called %d times for an invalid request", c.method, c.path, n)
		}
	}
}

func TestWaitErrorsMapToStatus(t *testing.T) {
	e := newDevEnv(t)
	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "quick", Command: "echo starting; exit 3"}, 201, nil)
	r := do(t, e.ts, "POST", "/v1/sandboxes/dev/processes/quick/wait-log", strings.NewReader(`{"pattern":"listening on"}`))
	if r.status != 409 || r.apiError(t).Code != "failed_precondition" || !strings.Contains(r.apiError(t).Message, "3") {
		t.Fatalf("exited before ready: %d %s", r.status, r.body)
	}
	r = do(t, e.ts, "POST", "/v1/sandboxes/dev/processes/quick/wait-port", strings.NewReader(`{"port":1,"mode":"tcp"}`))
	if r.status != 409 {
		t.Fatalf("wait-port on an exited process: %d %s", r.status, r.body)
	}

	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "slow", Command: "echo ready at 1; sleep 60"}, 201, nil)
	var wl api.WaitLogResult
	e.json(t, "POST", "/processes/slow/wait-log", api.WaitLogRequest{Pattern: `ready at (\d+)`, Regex: true}, 200, &wl)
	if wl.Line != "ready at 1" || wl.Stream != "stdout" || len(wl.Groups) != 2 || wl.Groups[1] != "1" {
		t.Fatalf("wait-log: %+v", wl)
	}
	r = do(t, e.ts, "POST", "/v1/sandboxes/dev/processes/slow/wait-log", strings.NewReader(`{"pattern":"never","timeoutMs":50}`))
	if r.status != 504 || r.apiError(t).Code != "deadline_exceeded" {
		t.Fatalf("timeout: %d %s", r.status, r.body)
	}
	var info api.ProcessInfo
	e.json(t, "DELETE", "/processes/slow?signal=KILL", nil, 200, nil)
	e.json(t, "POST", "/processes/slow/wait-exit", api.WaitExitRequest{TimeoutMs: 5000}, 200, &info)
	if info.Status != api.ProcessKilled {
		t.Fatalf("wait-exit: %+v", info)
	}
	e.waitReleased(t)
}

// TestLogStreamAgentDeath: when the agent goes away mid-stream the stream
// ends with an error event, never an exit.
func TestLogStreamAgentDeath(t *testing.T) {
	e := newDevEnv(t)
	e.json(t, "POST", "/processes", api.StartProcessRequest{ID: "talker", Command: "echo first; sleep 60"}, 201, nil)
	_, sr := e.openStream(t, context.Background(), "/processes/talker/logs")
	ev, err := sr.next()
	if err != nil || ev.name != "stdout" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	e.relay.cut()
	ev, err = sr.next()
	if err != nil || ev.name != "error" {
		t.Fatalf("after the agent died: %+v %v, want an error event", ev, err)
	}
	var x api.ExecEvent
	if json.Unmarshal([]byte(ev.data), &x); x.Error == nil || x.Error.Code != "unavailable" {
		t.Fatalf("error event %s", ev.data)
	}
	if ev, err := sr.next(); err != io.EOF {
		t.Fatalf("after the terminal event: %+v %v", ev, err)
	}
	e.waitReleased(t)
}

func TestSessionState(t *testing.T) {
	e := newDevEnv(t)
	var si api.SessionInfo
	e.json(t, "POST", "/sessions", api.CreateSessionRequest{ID: "s1", Env: map[string]string{"GREETING": "hi"}}, 201, &si)
	if si.ID != "s1" || !si.Alive {
		t.Fatalf("session %+v", si)
	}
	dir := e.ag.Dir
	e.json(t, "POST", "/sessions/s1/exec", api.ExecRequest{Command: "cd " + dir + " && export SEEN=yes"}, 200, nil)
	var res sessionExecResult
	e.json(t, "POST", "/sessions/s1/exec", api.ExecRequest{Command: "pwd; echo $SEEN $GREETING"}, 200, &res)
	if res.Stdout != dir+"\nyes hi\n" || res.ExitCode != 0 {
		t.Fatalf("cd/export did not persist: %+v", res)
	}
	// The same as a stream, with the exit status in one exit event.
	r := do(t, e.ts, "POST", "/v1/sandboxes/dev/sessions/s1/exec", strings.NewReader(`{"command":"pwd; exit 7"}`), "Accept", "text/event-stream")
	events, _ := readSSE(t, strings.NewReader(string(r.body)))
	last := events[len(events)-1]
	var se sessionExecEvent
	if err := json.Unmarshal([]byte(last.data), &se); err != nil || last.name != "exit" || se.Exit == nil || se.Exit.ExitCode != 7 || !se.Exit.ShellExited {
		t.Fatalf("stream end %+v %s", last, last.data)
	}
	if out, _, term := collectExec(t, events); out != dir+"\n" || len(term) != 1 {
		t.Fatalf("streamed %q, terminal events %+v", out, term)
	}
	// The shell exited: the next command runs in a fresh one, and says so.
	e.json(t, "POST", "/sessions/s1/exec", api.ExecRequest{Command: "true"}, 200, &res)
	if !res.Restarted || res.Notice == "" {
		t.Fatalf("restart not reported: %+v", res)
	}
	var sl api.SessionList
	e.json(t, "GET", "/sessions", nil, 200, &sl)
	if len(sl.Sessions) != 1 {
		t.Fatalf("sessions %+v", sl)
	}
	e.json(t, "DELETE", "/sessions/s1?graceMs=0", nil, 204, nil)
	e.json(t, "GET", "/sessions/s1", nil, 404, nil)
	e.waitReleased(t)
}

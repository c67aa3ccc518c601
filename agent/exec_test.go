package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func newClient(t testing.TB) (*agenttest.Agent, *agentclient.Client) {
	t.Helper()
	a := agenttest.Start(t)
	c := agentclient.New(a.Socket)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return a, c
}

func run(t *testing.T, c *agentclient.Client, req api.ExecRequest) (string, string, api.ExitStatus) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.Exec(ctx, req, &out, &errb)
	if err != nil {
		t.Fatalf("exec %+v: %v", req, err)
	}
	return out.String(), errb.String(), st
}

func TestExecArgvAndShell(t *testing.T) {
	_, c := newClient(t)
	out, _, st := run(t, c, api.ExecRequest{Argv: []string{"echo", "hello", "world"}})
	if out != "hello world\n" || st.ExitCode != 0 || st.Signal != "" {
		t.Fatalf("argv: out %q status %+v", out, st)
	}
	out, errOut, st := run(t, c, api.ExecRequest{Command: "echo to-out; echo to-err >&2; exit 3"})
	if out != "to-out\n" || errOut != "to-err\n" || st.ExitCode != 3 {
		t.Fatalf("shell: out %q err %q status %+v", out, errOut, st)
	}
}

func TestExecSignalExit(t *testing.T) {
	_, c := newClient(t)
	_, _, st := run(t, c, api.ExecRequest{Command: "kill -TERM $$"})
	if st.ExitCode != 128+int(syscall.SIGTERM) || st.Signal != "SIGTERM" || st.TimedOut {
		t.Fatalf("status %+v, want 143 SIGTERM", st)
	}
}

func TestExecStdinEnvCwd(t *testing.T) {
	a, c := newClient(t)
	out, _, _ := run(t, c, api.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("from stdin")})
	if out != "from stdin" {
		t.Fatalf("stdin: got %q", out)
	}
	out, _, _ = run(t, c, api.ExecRequest{
		Command: `echo "$FOO|$HOME|$USER|$BERTH_BASE|$LANG"; pwd`,
		Env:     map[string]string{"FOO": "bar", "BERTH_BASE": "overridden"},
	})
	want := "bar|" + a.Home + "|root|overridden|C.UTF-8\n" + a.Home + "\n"
	if out != want {
		t.Fatalf("env/default cwd: got %q want %q", out, want)
	}
	out, _, _ = run(t, c, api.ExecRequest{Argv: []string{"pwd"}, Cwd: a.Dir})
	if out != a.Dir+"\n" {
		t.Fatalf("cwd: got %q", out)
	}
	// Relative cwd is relative to the user's home.
	os.Mkdir(filepath.Join(a.Home, "sub"), 0o755)
	out, _, _ = run(t, c, api.ExecRequest{Argv: []string{"pwd"}, Cwd: "sub"})
	if out != filepath.Join(a.Home, "sub")+"\n" {
		t.Fatalf("relative cwd: got %q", out)
	}
}

func TestExecUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	a, c := newClient(t)
	out, _, _ := run(t, c, api.ExecRequest{Command: `id -u; id -g; id -G; echo $HOME $USER; pwd`, User: "tester"})
	want := "1000\n1000\n1000 2000\n" + a.TesterHome + " tester\n" + a.TesterHome + "\n"
	if out != want {
		t.Fatalf("as tester: got %q want %q", out, want)
	}
	// A uid with no passwd entry runs with gid = uid and cwd /.
	out, _, _ = run(t, c, api.ExecRequest{Command: `id -u; id -g; pwd`, User: "4321"})
	if out != "4321\n4321\n/\n" {
		t.Fatalf("as 4321: got %q", out)
	}
}

func TestExecErrors(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	cases := []struct {
		name string
		req  api.ExecRequest
		kind error
	}{
		{"neither argv nor command", api.ExecRequest{}, errdefs.ErrInvalidArgument},
		{"both", api.ExecRequest{Argv: []string{"true"}, Command: "true"}, errdefs.ErrInvalidArgument},
		{"not found", api.ExecRequest{Argv: []string{"no-such-binary-xyz"}}, errdefs.ErrNotFound},
		{"missing cwd", api.ExecRequest{Argv: []string{"true"}, Cwd: filepath.Join(a.Dir, "nope")}, errdefs.ErrInvalidArgument},
		{"unknown user", api.ExecRequest{Argv: []string{"true"}, User: "nosuchuser"}, errdefs.ErrNotFound},
		{"NUL in argv", api.ExecRequest{Argv: []string{"echo", "a\x00b"}}, errdefs.ErrInvalidArgument},
		{"bad env", api.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}, errdefs.ErrInvalidArgument},
		{"negative timeout", api.ExecRequest{Argv: []string{"true"}, TimeoutMs: -1}, errdefs.ErrInvalidArgument},
	}
	for _, tc := range cases {
		_, err := c.Exec(ctx, tc.req, nil, nil)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: got %v, want kind %v", tc.name, err, tc.kind)
		}
	}
}

// lineWriter collects output and signals when n lines have arrived.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	n    int
	done chan struct{}
}

func newLineWriter(n int) *lineWriter { return &lineWriter{n: n, done: make(chan struct{})} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.n > 0 && bytes.Count(w.buf.Bytes(), []byte("\n")) >= w.n {
		w.n = 0
		close(w.done)
	}
	return len(p), nil
}

func (w *lineWriter) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Fields(w.buf.String())
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i >= 0 && i+2 < len(data) && data[i+2] != 'Z'
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("pid %d survived", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func pidsOf(t *testing.T, lines []string, n int) []int {
	t.Helper()
	if len(lines) < n {
		t.Fatalf("expected %d pids, got %q", n, lines)
	}
	var pids []int
	for _, l := range lines[:n] {
		pid, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("bad pid %q", l)
		}
		pids = append(pids, pid)
	}
	return pids
}

// treeScript starts three sleeps (one of them in a new session, out of the
// process group) and prints their pids and the shell's.
const treeScript = `sleep 100 & echo $!; setsid sleep 100 & echo $!; sleep 100 & echo $!; echo $$; wait`

func TestExecTimeoutKillsTree(t *testing.T) {
	_, c := newClient(t)
	out := newLineWriter(4)
	st, err := c.Exec(context.Background(), api.ExecRequest{Command: treeScript, TimeoutMs: 1500}, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.TimedOut || st.ExitCode != 137 || st.Signal != "SIGKILL" {
		t.Fatalf("status %+v, want timed out by SIGKILL", st)
	}
	waitGone(t, pidsOf(t, out.lines(), 4))
}

func TestExecDisconnectKillsTree(t *testing.T) {
	_, c := newClient(t)
	out := newLineWriter(4)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, api.ExecRequest{Command: treeScript}, out, nil)
		errc <- err
	}()
	select {
	case <-out.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no pids printed")
	}
	pids := pidsOf(t, out.lines(), 4)
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("pid %d not running before the disconnect", pid)
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("exec after cancel: %v", err)
	}
	waitGone(t, pids)
}

func TestExecStreamsBeforeExit(t *testing.T) {
	a, c := newClient(t)
	fifo := filepath.Join(a.Dir, "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out := newLineWriter(1)
	type res struct {
		st  api.ExitStatus
		err error
	}
	resc := make(chan res, 1)
	go func() {
		st, err := c.Exec(context.Background(), api.ExecRequest{Command: "echo first; cat " + fifo + "; echo second"}, out, nil)
		resc <- res{st, err}
	}()
	select {
	case <-out.done: // the command is blocked on the FIFO: it has not ended
	case r := <-resc:
		t.Fatalf("exec ended before its first line was streamed: %+v", r)
	case <-time.After(30 * time.Second):
		t.Fatal("first chunk never arrived")
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := <-resc
	if r.err != nil || r.st.ExitCode != 0 {
		t.Fatalf("exec: %+v", r)
	}
	if got := strings.Join(out.lines(), " "); got != "first second" {
		t.Fatalf("output %q", got)
	}
}

func TestExecLargeOutputAndBackgroundChild(t *testing.T) {
	_, c := newClient(t)
	out, _, st := run(t, c, api.ExecRequest{Command: "head -c 3000000 /dev/zero"})
	if len(out) != 3000000 || st.ExitCode != 0 {
		t.Fatalf("got %d bytes, %+v", len(out), st)
	}
	// A background child holding stdout open must not hold the exec open.
	start := time.Now()
	out, _, st = run(t, c, api.ExecRequest{Command: "sleep 30 & echo $!"})
	if time.Since(start) > 20*time.Second || st.ExitCode != 0 {
		t.Fatalf("exec with a background child: %+v after %v", st, time.Since(start))
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(out)); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestExecConcurrent(t *testing.T) {
	_, c := newClient(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var out bytes.Buffer
			st, err := c.Exec(context.Background(), api.ExecRequest{Command: "echo " + strconv.Itoa(i) + "; exit " + strconv.Itoa(i)}, &out, nil)
			if err != nil || st.ExitCode != i || out.String() != strconv.Itoa(i)+"\n" {
				errs <- errors.New("exec " + strconv.Itoa(i) + ": " + out.String())
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func TestExecHeartbeatsKeepIdleStreamAlive(t *testing.T) {
	req := api.ExecRequest{Argv: []string{"sleep", "1"}}
	// Heartbeats every 20 ms keep a silent 1 s command alive under a
	// 300 ms client stall timeout.
	a := agenttest.StartWith(t, func(c *agent.Config) { c.HeartbeatInterval = 20 * time.Millisecond })
	c := agentclient.New(a.Socket)
	defer c.Close()
	c.StallTimeout = 300 * time.Millisecond
	if st, err := c.Exec(context.Background(), req, nil, nil); err != nil || st.ExitCode != 0 {
		t.Fatalf("with heartbeats: %+v %v", st, err)
	}
	// Negative control: without heartbeats the same client gives up.
	a = agenttest.StartWith(t, func(c *agent.Config) { c.HeartbeatInterval = time.Hour })
	c = agentclient.New(a.Socket)
	defer c.Close()
	c.StallTimeout = 300 * time.Millisecond
	if _, err := c.Exec(context.Background(), req, nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("negative control: without heartbeats the exec did not stall out: %v", err)
	}
}

// TestExecLeaksNoFds is checklist #12: a command sees only stdin, stdout
// and stderr, never the agent's socket or other descriptors.
func TestExecLeaksNoFds(t *testing.T) {
	_, c := newClient(t)
	out, _, _ := run(t, c, api.ExecRequest{Command: "ls /proc/$$/fd"})
	if got := strings.Fields(out); strings.Join(got, " ") != "0 1 2" {
		t.Fatalf("the command's shell holds fds %v", got)
	}
}

package agent_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func stExec(t *testing.T, c *agentclient.Client, id string, req api.ExecRequest) (string, string, api.SessionExitStatus) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := c.SessionExec(ptCtx(t), id, req, &out, &errb)
	if err != nil {
		t.Fatalf("session exec %q: %v", req.Command, err)
	}
	return out.String(), errb.String(), st
}

func stSession(t *testing.T, c *agentclient.Client, req api.CreateSessionRequest) api.SessionInfo {
	t.Helper()
	s, err := c.CreateSession(ptCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSession(ptCtx(t), s.ID, -1) })
	return s
}

func TestSessionStatePersists(t *testing.T) {
	a, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{ID: "main", Env: map[string]string{"GREETING": "hello"}})
	if s.ID != "main" || !s.Alive || s.PID <= 0 || s.Cwd != a.Home || !strings.HasSuffix(s.Shell, "bash") {
		t.Fatalf("session %+v", s)
	}
	if _, err := c.CreateSession(ptCtx(t), api.CreateSessionRequest{ID: "main"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate: %v", err)
	}
	stExec(t, c, "main", api.ExecRequest{Command: "cd " + a.Dir + " && export FOO=bar && myfn() { echo fn:$1; }"})
	out, errOut, st := stExec(t, c, "main", api.ExecRequest{Command: `pwd; echo "$FOO $GREETING"; myfn x; echo oops >&2; printf no-newline`})
	if out != a.Dir+"\nbar hello\nfn:x\nno-newline" || errOut != "oops\n" || st.ExitCode != 0 || st.Restarted || st.ShellExited {
		t.Fatalf("out %q err %q st %+v", out, errOut, st)
	}
	if _, _, st := stExec(t, c, "main", api.ExecRequest{Command: "(exit 42)"}); st.ExitCode != 42 {
		t.Fatalf("exit code %+v", st)
	}
	// Quotes, heredocs and a trailing comment cannot break the wrapper.
	out, _, _ = stExec(t, c, "main", api.ExecRequest{Command: "cat <<'EOF'\nit's } a \"test\"\nEOF\necho done # trailing comment"})
	if out != "it's } a \"test\"\ndone\n" {
		t.Fatalf("quoting: %q", out)
	}
	// Per-command cwd and env apply to that command only.
	out, _, _ = stExec(t, c, "main", api.ExecRequest{Command: "pwd; echo $FOO; cd /", Cwd: "/", Env: map[string]string{"FOO": "once"}})
	if out != "/\nonce\n" {
		t.Fatalf("per-command: %q", out)
	}
	if out, _, _ := stExec(t, c, "main", api.ExecRequest{Command: "pwd; echo $FOO"}); out != a.Dir+"\nbar\n" {
		t.Fatalf("per-command state leaked: %q", out)
	}
	if info, err := c.GetSession(ptCtx(t), "main"); err != nil || info.Cwd != a.Dir {
		t.Fatalf("get: %+v %v", info, err)
	}
	// A process started in the session starts where the session is.
	p := ptStart(t, c, api.StartProcessRequest{SessionID: "main", Command: `pwd; echo "$FOO"`})
	if in, err := c.WaitForExit(ptCtx(t), p.ID, 30*time.Second); err != nil || in.Cwd != a.Dir {
		t.Fatalf("session process: %+v %v", in, err)
	}
	if logs, _ := c.ProcessLogs(ptCtx(t), p.ID); string(logs.Stdout) != a.Dir+"\nbar\n" {
		t.Fatalf("session process output %q", logs.Stdout)
	}
	list, err := c.ListSessions(ptCtx(t))
	if err != nil || len(list) != 1 || list[0].ID != "main" {
		t.Fatalf("list %+v %v", list, err)
	}
	if _, err := c.SessionExec(ptCtx(t), "ghost", api.ExecRequest{Command: "true"}, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing session: %v", err)
	}
}

func TestSessionStdinNeverEatsProtocol(t *testing.T) {
	_, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{})
	// Commands that read stdin get EOF at once (stdin is /dev/null)...
	out, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: `cat; read x; echo "got:$x:$?"`})
	if out != "got::1\n" || st.ExitCode != 0 {
		t.Fatalf("stdin readers: %q %+v", out, st)
	}
	// ...or the request's stdin.
	out, _, _ = stExec(t, c, s.ID, api.ExecRequest{Command: "cat", Stdin: []byte("line1\nline2")})
	if out != "line1\nline2" {
		t.Fatalf("stdin: %q", out)
	}
	// And the session still works.
	if out, _, _ := stExec(t, c, s.ID, api.ExecRequest{Command: "echo alive"}); out != "alive\n" {
		t.Fatalf("after stdin readers: %q", out)
	}
}

func TestSessionCommandsRunInOrder(t *testing.T) {
	a, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{})
	gate := filepath.Join(a.Dir, "gate")
	// A waits for a file that only B creates. If the session ran them
	// concurrently A would succeed; serialized, A can only time out.
	type res struct {
		st  api.SessionExitStatus
		err error
	}
	ch := make(chan res, 1)
	go func() {
		st, err := c.SessionExec(ptCtx(t), s.ID, api.ExecRequest{
			Command: "sh -c 'while [ ! -e " + gate + " ]; do sleep 0.01; done'", TimeoutMs: 500,
		}, nil, nil)
		ch <- res{st, err}
	}()
	// Make sure A holds the session before B is sent.
	ptEventually(t, 10*time.Second, "command A to start", func() bool {
		out, _ := os.ReadFile("/proc/" + strconv.Itoa(s.PID) + "/task/" + strconv.Itoa(s.PID) + "/children")
		return len(bytes.TrimSpace(out)) > 0
	})
	_, _, bst := stExec(t, c, s.ID, api.ExecRequest{Command: "touch " + gate})
	r := <-ch
	if r.err != nil || !r.st.TimedOut {
		t.Fatalf("A: %+v %v (ran concurrently with B?)", r.st, r.err)
	}
	if bst.ExitCode != 0 {
		t.Fatalf("B: %+v", bst)
	}
	// The timeout killed A's child, not the shell: state survives.
	stExec(t, c, s.ID, api.ExecRequest{Command: "export KEEP=1"})
	if out, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "echo $KEEP"}); out != "1\n" || st.Restarted {
		t.Fatalf("after timeout: %q %+v", out, st)
	}
	// A builtin loop has no child to kill: the shell itself goes, and the
	// next command says so.
	_, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "while :; do sleep 0.01; done", TimeoutMs: 100})
	if !st.TimedOut || !st.ShellExited {
		t.Fatalf("builtin loop timeout: %+v", st)
	}
	if out, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "echo $KEEP"}); out != "\n" || !st.Restarted {
		t.Fatalf("after shell kill: %q %+v", out, st)
	}
}

func TestSessionsRunConcurrently(t *testing.T) {
	a, c := newClient(t)
	s1 := stSession(t, c, api.CreateSessionRequest{})
	s2 := stSession(t, c, api.CreateSessionRequest{})
	gate := filepath.Join(a.Dir, "gate2")
	ch := make(chan api.SessionExitStatus, 1)
	go func() {
		st, err := c.SessionExec(ptCtx(t), s1.ID, api.ExecRequest{
			Command: "while [ ! -e " + gate + " ]; do sleep 0.01; done; echo through", TimeoutMs: 30000,
		}, nil, nil)
		if err != nil {
			t.Error(err)
		}
		ch <- st
	}()
	stExec(t, c, s2.ID, api.ExecRequest{Command: "touch " + gate})
	if st := <-ch; st.TimedOut || st.ExitCode != 0 {
		t.Fatalf("session 1 was blocked by session 2: %+v", st)
	}
	// Own env and cwd, shared filesystem.
	stExec(t, c, s1.ID, api.ExecRequest{Command: "export ONLY1=x; cd /"})
	if out, _, _ := stExec(t, c, s2.ID, api.ExecRequest{Command: `echo "[$ONLY1]"; pwd; ls ` + gate}); out != "[]\n"+a.Home+"\n"+gate+"\n" {
		t.Fatalf("isolation: %q", out)
	}
}

func TestSessionDeadShellRestarts(t *testing.T) {
	_, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{})
	stExec(t, c, s.ID, api.ExecRequest{Command: "export LOST=1"})
	_, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "echo bye; exit 3"})
	if !st.ShellExited || st.ExitCode != 3 || st.Notice == "" {
		t.Fatalf("exit: %+v", st)
	}
	out, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: `echo "again[$LOST]"`})
	if out != "again[]\n" || !st.Restarted || !strings.Contains(st.Notice, "exit code 3") || st.ShellExited {
		t.Fatalf("restart: %q %+v", out, st)
	}
	if _, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "true"}); st.Restarted {
		t.Fatalf("restart notice repeated: %+v", st)
	}
	// Killed by a signal.
	_, _, st = stExec(t, c, s.ID, api.ExecRequest{Command: "kill -KILL $$"})
	if !st.ShellExited || st.Signal != "SIGKILL" {
		t.Fatalf("kill: %+v", st)
	}
	if _, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "true"}); !st.Restarted || !strings.Contains(st.Notice, "SIGKILL") {
		t.Fatalf("restart after kill: %+v", st)
	}
}

func TestSessionDeleteKillsItsProcesses(t *testing.T) {
	_, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{ID: "doomed"})
	other := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000"})
	out, _, _ := stExec(t, c, s.ID, api.ExecRequest{Command: "sleep 1000 & echo $!"})
	job, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("job pid %q", out)
	}
	p := ptStart(t, c, api.StartProcessRequest{SessionID: s.ID, Command: "sleep 1000"})
	if !ptAlive(job) || !ptAlive(p.PID) {
		t.Fatal("setup: processes not running")
	}
	if err := c.DeleteSession(ptCtx(t), s.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	ptEventually(t, 10*time.Second, "session processes to die", func() bool {
		return !ptAlive(job) && !ptAlive(p.PID) && !ptAlive(s.PID)
	})
	if in, _ := c.GetProcess(ptCtx(t), p.ID); in.Status != api.ProcessKilled {
		t.Fatalf("session process: %+v", in)
	}
	if in, _ := c.GetProcess(ptCtx(t), other.ID); in.Status != api.ProcessRunning {
		t.Fatalf("a process of no session was touched: %+v", in)
	}
	if _, err := c.GetSession(ptCtx(t), s.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted session: %v", err)
	}
	if err := c.DeleteSession(ptCtx(t), s.ID, 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestSessionAsOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	a, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{User: "tester"})
	if s.User != "tester" || s.Cwd != a.TesterHome {
		t.Fatalf("session %+v", s)
	}
	out, errOut, st := stExec(t, c, s.ID, api.ExecRequest{Command: "id -u; echo $HOME; echo e >&2; cat", Stdin: []byte("in")})
	if out != "1000\n"+a.TesterHome+"\nin" || errOut != "e\n" || st.ExitCode != 0 {
		t.Fatalf("out %q err %q %+v", out, errOut, st)
	}
	if _, err := c.SessionExec(ptCtx(t), s.ID, api.ExecRequest{Command: "true", User: "root"}, nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("per-command user: %v", err)
	}
}

func TestSessionCallerGoneStopsCommand(t *testing.T) {
	_, c := newClient(t)
	s := stSession(t, c, api.CreateSessionRequest{})
	ctx, cancel := context.WithCancel(ptCtx(t))
	var out ptSyncBuffer
	errc := make(chan error, 1)
	go func() {
		_, err := c.SessionExec(ctx, s.ID, api.ExecRequest{Command: "sleep 1000 & echo $!; wait"}, &out, nil)
		errc <- err
	}()
	ptEventually(t, 10*time.Second, "the command's output", func() bool { return strings.HasSuffix(out.String(), "\n") })
	pid, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled exec returned no error")
	}
	ptEventually(t, 10*time.Second, "the command's process to be killed", func() bool { return !ptAlive(pid) })
	if out, _, st := stExec(t, c, s.ID, api.ExecRequest{Command: "echo next"}); out != "next\n" || st.Restarted {
		t.Fatalf("after cancel: %q %+v", out, st)
	}
}

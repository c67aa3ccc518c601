package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

// agentBackend serves the dev-loop routes from a real in-process agent;
// every other Backend method panics into a 500.
type agentBackend struct {
	control.Backend
	ag *agentclient.Client
}

func (b *agentBackend) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if name != "dev" {
		return nil, nil, errdefs.NotFound("sandbox %q not found", name)
	}
	return b.ag, func() {}, nil
}

func newDevClient(t *testing.T) (*Client, *agenttest.Agent) {
	t.Helper()
	a := agenttest.Start(t)
	ag := agentclient.New(a.Socket)
	t.Cleanup(ag.Close)
	ts := httptest.NewServer(server.New(&agentBackend{ag: ag}, server.Options{APIKey: key}))
	t.Cleanup(ts.Close)
	return New(ts.URL, key), a
}

func TestProcessesSDK(t *testing.T) {
	c, _ := newDevClient(t)
	ctx := context.Background()
	p, err := c.StartProcess(ctx, "dev", api.StartProcessRequest{Command: "echo out; echo err >&2; sleep 0.1; exit 4"})
	if err != nil || p.ID == "" {
		t.Fatalf("start: %+v %v", p, err)
	}
	var stdout, stderr bytes.Buffer
	st, err := c.StreamProcessLogs(ctx, "dev", p.ID, &stdout, &stderr)
	if err != nil || st.ExitCode != 4 || stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Fatalf("stream: %+v %v %q %q", st, err, stdout.String(), stderr.String())
	}
	logs, err := c.ProcessLogs(ctx, "dev", p.ID)
	if err != nil || string(logs.Stdout) != "out\n" {
		t.Fatalf("logs %+v %v", logs, err)
	}
	if _, err := c.WaitForLog(ctx, "dev", p.ID, api.WaitLogRequest{Pattern: "never"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("wait-log on an exited process: %v", err)
	}
	if _, err := c.GetProcess(ctx, "dev", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}

	long, err := c.StartProcess(ctx, "dev", api.StartProcessRequest{ID: "server", Command: "echo listening; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.WaitForLog(ctx, "dev", long.ID, api.WaitLogRequest{Pattern: "listening"}); err != nil || r.Line != "listening" {
		t.Fatalf("wait-log %+v %v", r, err)
	}
	if _, err := c.WaitForExit(ctx, "dev", long.ID, 20*time.Millisecond); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("wait-exit timeout: %v", err)
	}
	list, err := c.ListProcesses(ctx, "dev", "")
	if err != nil || len(list) != 2 {
		t.Fatalf("list %+v %v", list, err)
	}
	info, err := c.KillProcess(ctx, "dev", "server", KillOptions{Signal: "TERM", Grace: time.Second})
	if err != nil || info.Status != api.ProcessKilled || info.Signal == "" {
		t.Fatalf("kill %+v %v", info, err)
	}
	if n, err := c.KillAllProcesses(ctx, "dev", KillOptions{}); err != nil || n != 0 {
		t.Fatalf("kill all: %d %v", n, err)
	}
}

func TestSessionsAndGitSDK(t *testing.T) {
	c, a := newDevClient(t)
	ctx := context.Background()
	s, err := c.CreateSession(ctx, "dev", api.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SessionExec(ctx, "dev", s.ID, api.ExecRequest{Command: "cd " + a.Dir}); err != nil {
		t.Fatal(err)
	}
	res, err := c.SessionExec(ctx, "dev", s.ID, api.ExecRequest{Command: "pwd"})
	if err != nil || res.Stdout != a.Dir+"\n" {
		t.Fatalf("cd did not persist: %+v %v", res, err)
	}
	var out bytes.Buffer
	st, err := c.SessionExecStream(ctx, "dev", s.ID, api.ExecRequest{Command: "pwd; exit 3"}, &out, nil)
	if err != nil || st.ExitCode != 3 || !st.ShellExited || out.String() != a.Dir+"\n" {
		t.Fatalf("stream %+v %v %q", st, err, out.String())
	}
	if got, err := c.GetSession(ctx, "dev", s.ID); err != nil || got.ID != s.ID {
		t.Fatalf("get %+v %v", got, err)
	}
	if err := c.DeleteSession(ctx, "dev", s.ID, -1); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListSessions(ctx, "dev"); err != nil || len(l) != 0 {
		t.Fatalf("after delete %+v %v", l, err)
	}

	// git: clone a local bare repository through the whole stack.
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, b)
		}
	}
	work := filepath.Join(dir, "w")
	git("init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README"), []byte("hi\n"), 0o644)
	git("-C", work, "add", ".")
	git("-C", work, "commit", "-q", "-m", "one")
	git("clone", "-q", "--bare", work, filepath.Join(dir, "r.git"))
	target := filepath.Join(a.Dir, "clone")
	gr, err := c.GitCheckout(ctx, "dev", api.GitCheckoutRequest{URL: "file://" + filepath.Join(dir, "r.git"), TargetDir: target})
	if err != nil || gr.Branch != "main" || gr.Commit == "" {
		t.Fatalf("clone %+v %v", gr, err)
	}
	if b, _ := os.ReadFile(filepath.Join(target, "README")); string(b) != "hi\n" {
		t.Fatalf("cloned README %q", b)
	}
	if _, err := c.GitCheckout(ctx, "dev", api.GitCheckoutRequest{URL: "file://" + filepath.Join(dir, "r.git"), TargetDir: target}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("non-empty target: %v", err)
	}
}

func TestAttachTerminalSDK(t *testing.T) {
	c, _ := newDevClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The dial context bounds only the handshake: the connection must
	// outlive it.
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := c.AttachTerminal(dctx, "dev", "main", 80, 24)
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("echo $((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for !strings.Contains(out.String(), "42") {
		typ, p, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read (have %q): %v", out.String(), err)
		}
		if typ == websocket.MessageBinary {
			out.Write(p)
		}
	}
	terms, err := c.ListTerminals(ctx, "dev")
	if err != nil || len(terms) != 1 || terms[0].ID != "main" || terms[0].Clients != 1 {
		t.Fatalf("list %+v %v", terms, err)
	}
	conn.Close(websocket.StatusNormalClosure, "")
	if err := c.DeleteTerminal(ctx, "dev", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AttachTerminal(ctx, "nope", "main", 0, 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing sandbox: %v", err)
	}
	bad := New(c.BaseURL(), "wrong")
	if _, err := bad.AttachTerminal(ctx, "dev", "main", 0, 0); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("wrong key: %v", err)
	}
}

func TestWatchSDK(t *testing.T) {
	c, a := newDevClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := errors.New("seen it")
	var types []string
	err := c.Watch(ctx, "dev", a.Dir, WatchOptions{Recursive: true}, func(ev api.WatchEvent) error {
		types = append(types, ev.Type)
		switch {
		case ev.Type == api.WatchWatching:
			return os.WriteFile(filepath.Join(a.Dir, "f.txt"), nil, 0o644)
		case ev.EventType == api.FileCreate && ev.Path == filepath.Join(a.Dir, "f.txt"):
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || types[0] != api.WatchWatching {
		t.Fatalf("watch: %v %v", err, types)
	}
	if err := c.Watch(ctx, "dev", filepath.Join(a.Dir, "missing"), WatchOptions{}, func(api.WatchEvent) error { return nil }); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing path: %v", err)
	}
}

// TestStreamsWithoutTerminalEvent: a stream that stops without its terminal
// event is Unavailable, never a status.
func TestStreamsWithoutTerminalEvent(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.HasSuffix(r.URL.Path, "/watch") {
			fmt.Fprint(w, "event: watching\ndata: {\"type\":\"watching\"}\n\n")
		} else {
			fmt.Fprint(w, "event: stdout\ndata: {\"type\":\"stdout\",\"data\":\"aGk=\"}\n\n")
		}
	}))
	defer ts.Close()
	c := New(ts.URL, key)
	var out bytes.Buffer
	if _, err := c.StreamProcessLogs(context.Background(), "dev", "p", &out, nil); !errors.Is(err, errdefs.ErrUnavailable) || out.String() != "hi" {
		t.Fatalf("logs: %v %q", err, out.String())
	}
	if _, err := c.SessionExecStream(context.Background(), "dev", "s", api.ExecRequest{Command: "x"}, io.Discard, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("session exec: %v", err)
	}
	n := 0
	err := c.Watch(context.Background(), "dev", "/x", WatchOptions{}, func(api.WatchEvent) error { n++; return nil })
	if !errors.Is(err, errdefs.ErrUnavailable) || n != 1 {
		t.Fatalf("watch: %v (%d events)", err, n)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

// devFake serves the dev-loop routes from a real in-process agent.
type devFake struct {
	control.Backend
	ag *agentclient.Client
}

func (f *devFake) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if name != "dev" {
		return nil, nil, errdefs.NotFound("sandbox %q not found", name)
	}
	return f.ag, func() {}, nil
}

func newDevCLI(t *testing.T) (*cli, *agenttest.Agent) {
	t.Helper()
	a := agenttest.Start(t)
	ag := agentclient.New(a.Socket)
	t.Cleanup(ag.Close)
	c := newCLI(t)
	ts := httptestServer(t, &devFake{ag: ag})
	c.url = ts
	return c, a
}

func httptestServer(t *testing.T, b control.Backend) string {
	ts := httptest.NewServer(server.New(b, server.Options{APIKey: "k"}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestShellCommandQuoting(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"npm run dev | tee log"}, "npm run dev | tee log"},
		{[]string{"python3", "-m", "http.server", "8000"}, "python3 -m http.server 8000"},
		{[]string{"echo", "it's", "a b", ""}, `echo 'it'\''s' 'a b' ''`},
		{[]string{"sh", "-c", "echo $HOME"}, `sh -c 'echo $HOME'`},
	}
	for _, c := range cases {
		if got := shellCommand(c.args); got != c.want {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
}

func TestDevLoopFlagErrors(t *testing.T) {
	c := newCLI(t) // no agent: these must fail before any request
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"start", "dev"}, "no command given"},
		{[]string{"start", "dev", "x", "--", "ls"}, "only the sandbox name"},
		{[]string{"start", "dev", "--wait-port", "1", "--wait-log", "x", "--", "ls"}, "not both"},
		{[]string{"kill", "dev"}, "PROC_ID"},
		{[]string{"kill", "dev", "p", "--all"}, "only the sandbox NAME"},
		{[]string{"kill", "dev", "--all", "--signal", "INT"}, "--all always sends TERM"},
		{[]string{"logs", "dev"}, "accepts 2 arg"},
		{[]string{"watch", "dev", "/x", "--include", "a", "--exclude", "b"}, "not both"},
		{[]string{"git", "clone", "dev", "u", "--depth", "-1"}, "--depth must be positive"},
	}
	for _, tc := range cases {
		code, _, errs := c.run("", tc.args...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", tc.args, code, errs, tc.want)
		}
	}
	for _, cmd := range []string{"start", "ps", "logs", "kill", "shell", "watch", "git clone"} {
		_, out, _ := c.run("", append(strings.Fields(cmd), "--help")...)
		if !strings.Contains(out, "Example") {
			t.Errorf("berth %s --help has no examples:\n%s", cmd, out)
		}
	}
}

func TestStartPsLogsKill(t *testing.T) {
	c, _ := newDevCLI(t)
	code, out, errs := c.run("", "start", "dev", "--id", "web", "--env", "WHO=berth", "--wait-log", "ready", "--", "echo ready $WHO; echo warn >&2; sleep 60")
	if code != 0 || out != "web\n" {
		t.Fatalf("start: %d %q %q", code, out, errs)
	}
	code, out, _ = c.run("", "ps", "dev")
	if code != 0 || !regexp.MustCompile(`(?m)^web\s+\d+\s+running\s+-\s+`).MatchString(out) || !strings.HasPrefix(out, "ID") {
		t.Fatalf("ps: %d\n%s", code, out)
	}
	// stdout and stderr are separate pipes: "ready" on one says nothing
	// about whether "warn" on the other is buffered yet, so poll briefly.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, out, errs = c.run("", "logs", "dev", "web")
		if code == 0 && out == "ready berth\n" && errs == "warn\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs: %d %q %q", code, out, errs)
		}
	}
	code, out, _ = c.run("", "kill", "dev", "web", "--signal", "TERM")
	if code != 0 || !strings.HasPrefix(out, "web killed") {
		t.Fatalf("kill: %d %q", code, out)
	}
	// A process that exits before it is ready fails start, pointing at
	// its logs.
	code, _, errs = c.run("", "start", "dev", "--id", "bad", "--wait-log", "ready", "--", "sh", "-c", "exit 2")
	if code != 1 || !strings.Contains(errs, "berth logs dev bad") {
		t.Fatalf("start of a failing process: %d %q", code, errs)
	}
	code, out, errs = c.run("", "logs", "-f", "dev", "bad")
	if code != 0 || out != "" {
		t.Fatalf("logs -f: %d %q %q", code, out, errs)
	}
	c.run("", "start", "dev", "--id", "a", "--", "sleep 60")
	code, out, _ = c.run("", "kill", "dev", "--all", "--grace", "0")
	if code != 0 || out != "killed 1 process(es)\n" {
		t.Fatalf("kill --all: %d %q", code, out)
	}
	if code, _, errs := c.run("", "logs", "dev", "nope"); code != 1 || !strings.Contains(errs, "nope") {
		t.Fatalf("missing process: %d %q", code, errs)
	}
}

func TestShellPiped(t *testing.T) {
	c, _ := newDevCLI(t)
	code, out, errs := c.run("echo $((6*7))\nexit 3\n", "shell", "dev", "--id", "t")
	if code != 3 || !strings.Contains(out, "42") {
		t.Fatalf("shell: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Stdin ends without exit: the shell still ends, with the last
	// command's status.
	code, out, _ = c.run("echo hi\nfalse\n", "shell", "dev", "--id", "t2")
	if code != 1 || !strings.Contains(out, "hi") {
		t.Fatalf("shell with EOF: %d %q", code, out)
	}
}

// syncBuffer is a bytes.Buffer safe to read while the command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWatchAndGitCommands(t *testing.T) {
	c, a := newDevCLI(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--url", c.url, "--api-key", "k", "watch", "dev", a.Dir, "--include", "*.txt"}, strings.NewReader(""), &out, &errs)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errs.String(), "watching") {
		if time.Now().After(deadline) {
			t.Fatalf("watch never started: %q", errs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	os.WriteFile(filepath.Join(a.Dir, "skip.log"), nil, 0o644)
	os.WriteFile(filepath.Join(a.Dir, "a.txt"), nil, 0o644)
	for !strings.Contains(out.String(), "a.txt") {
		if time.Now().After(deadline) {
			t.Fatalf("no event: %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 130 {
		t.Fatalf("interrupted watch exited %d", code)
	}
	first := strings.SplitN(out.String(), "\n", 2)[0]
	if first != "create    "+filepath.Join(a.Dir, "a.txt") || strings.Contains(out.String(), "skip.log") {
		t.Fatalf("watch output %q", out.String())
	}

	code, gout, gerr := c.run("", "git", "clone", "dev", "--dir", filepath.Join(a.Dir, "x"), "--", "-oProxyCommand=touch /tmp/pwned")
	if code != 1 || !strings.Contains(gerr, "must not start with '-'") || gout != "" {
		t.Fatalf("git clone of an option-looking URL: %d %q %q", code, gout, gerr)
	}
}

// TestShellOnATerminal runs berth shell on a real pty: raw mode while it
// runs, window-size changes forwarded on SIGWINCH, the shell's exit code,
// and the terminal's modes restored afterwards.
func TestShellOnATerminal(t *testing.T) {
	c, _ := newDevCLI(t)
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	if err := pty.Setsize(slave, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil || before.Lflag&unix.ICANON == 0 {
		t.Fatalf("fresh pty not in canonical mode: %v", err)
	}
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"--url", c.url, "--api-key", "k", "shell", "dev", "--id", "tty"}, slave, slave, slave)
	}()
	var out syncBuffer
	go io.Copy(&out, master)
	waitFor := func(s string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), s) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in %q", s, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	master.Write([]byte("stty size\n"))
	waitFor("30 100")
	raw, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if raw.Lflag&(unix.ICANON|unix.ECHO) != 0 {
		t.Fatal("local terminal not in raw mode while the shell runs")
	}
	pty.Setsize(slave, &pty.Winsize{Rows: 40, Cols: 120})
	unix.Kill(os.Getpid(), unix.SIGWINCH)
	// Resize is asynchronous; ask until the sandbox's pty has it.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "40 120") {
		if time.Now().After(deadline) {
			t.Fatalf("resize not forwarded: %q", out.String())
		}
		master.Write([]byte("stty size\n"))
		time.Sleep(20 * time.Millisecond)
	}
	master.Write([]byte("exit 4\n"))
	select {
	case code := <-done:
		if code != 4 {
			t.Fatalf("exit %d, want 4", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("berth shell did not return after exit")
	}
	after, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Fatalf("terminal modes not restored: %+v, want %+v", after, before)
	}
}

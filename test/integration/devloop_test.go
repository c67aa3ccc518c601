//go:build integration

package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/coder/websocket"
)

// gitServer runs `git daemon` in a network namespace made by the test, at
// 203.0.113.20 (TEST-NET-3) routed from the host, standing in for a git
// host on the internet. It serves repo.git with branches main and feature.
func gitServer(t *testing.T) string {
	t.Helper()
	const ns = "berthit-git"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	cleanup := func() {
		exec.Command("ip", "route", "del", "203.0.113.20/32").Run()
		exec.Command("ip", "link", "del", "bgit0").Run()
		exec.Command("ip", "netns", "del", ns).Run()
	}
	cleanup()
	sh("ip", "netns", "add", ns)
	sh("ip", "link", "add", "bgit0", "type", "veth", "peer", "name", "bgit1", "netns", ns)
	sh("ip", "addr", "add", "198.19.0.1/30", "dev", "bgit0")
	sh("ip", "link", "set", "bgit0", "up")
	sh("ip", "-n", ns, "addr", "add", "198.19.0.2/30", "dev", "bgit1")
	sh("ip", "-n", ns, "link", "set", "bgit1", "up")
	sh("ip", "-n", ns, "link", "set", "lo", "up")
	sh("ip", "-n", ns, "addr", "add", "203.0.113.20/32", "dev", "lo")
	sh("ip", "-n", ns, "route", "add", "default", "via", "198.19.0.1")
	sh("ip", "route", "add", "203.0.113.20/32", "via", "198.19.0.2")

	base := t.TempDir()
	work := filepath.Join(base, "work")
	os.MkdirAll(work, 0o755)
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e", "HOME="+base)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	git(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte("from the git server\n"), 0o644)
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "one")
	git(work, "checkout", "-q", "-b", "feature")
	os.WriteFile(filepath.Join(work, "FEATURE"), []byte("feature branch\n"), 0o644)
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "two")
	git(base, "clone", "-q", "--bare", work, filepath.Join(base, "srv", "repo.git"))

	daemon := exec.Command("ip", "netns", "exec", ns, "git", "daemon", "--reuseaddr", "--export-all",
		"--base-path="+filepath.Join(base, "srv"), "--listen=203.0.113.20", "--port=9418", filepath.Join(base, "srv"))
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		daemon.Process.Kill()
		daemon.Wait()
		cleanup()
	})
	return "git://203.0.113.20/repo.git"
}

func TestGitCheckout(t *testing.T) {
	ctx := context.Background()
	url := gitServer(t)
	sandbox(t, api.CreateSandboxRequest{Name: "it-git", Internet: ptr(true)})
	sandbox(t, api.CreateSandboxRequest{Name: "it-git-offline"})
	var res api.GitCheckoutResult
	var err error
	for i := 0; i < 50; i++ { // git daemon takes a moment to listen
		res, err = d.c.GitCheckout(ctx, "it-git", api.GitCheckoutRequest{URL: url, Branch: "feature", Depth: 1})
		if err == nil || !errors.Is(err, errdefs.ErrUnavailable) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	if r := run(t, "it-git", "cat "+res.TargetDir+"/FEATURE "+res.TargetDir+"/README"); r.Stdout != "feature branch\nfrom the git server\n" {
		t.Fatalf("checked-out files: %q (%+v)", r.Stdout, res)
	}
	cases := []struct {
		name string
		req  api.GitCheckoutRequest
		kind error
		text string
	}{
		{"branch not found", api.GitCheckoutRequest{URL: url, Branch: "nope", TargetDir: "/tmp/b"}, errdefs.ErrNotFound, "branch"},
		{"repository not found", api.GitCheckoutRequest{URL: "git://203.0.113.20/missing.git", TargetDir: "/tmp/m"}, errdefs.ErrNotFound, ""},
		{"network error", api.GitCheckoutRequest{URL: "git://203.0.113.20:9999/repo.git", TargetDir: "/tmp/n"}, errdefs.ErrUnavailable, ""},
		{"invalid URL", api.GitCheckoutRequest{URL: "--upload-pack=touch /tmp/pwned", TargetDir: "/tmp/i"}, errdefs.ErrInvalidArgument, ""},
	}
	for _, c := range cases {
		_, err := d.c.GitCheckout(ctx, "it-git", c.req)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: got %v", c.name, err)
		}
	}
	// Without internet the same clone is a network error.
	if _, err := d.c.GitCheckout(ctx, "it-git-offline", api.GitCheckoutRequest{URL: url}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("clone without internet: %v", err)
	}
}

func TestBackgroundProcessesAndReadiness(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-procs"})
	t0 := time.Now()
	p, err := d.c.StartProcess(ctx, "it-procs", api.StartProcessRequest{Command: "echo booting; sleep 0.5; echo ready >&2; exec python3 -m http.server 8001 --bind 127.0.0.1", ID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "web" || p.PID == 0 || p.Status != "running" {
		t.Fatalf("handle: %+v", p)
	}
	// waitForLog matches across stdout and stderr.
	wl, err := d.c.WaitForLog(ctx, "it-procs", "web", api.WaitLogRequest{Pattern: "rea(dy)", Regex: true, TimeoutMs: 10000})
	if err != nil || wl.Line != "ready" || wl.Stream != "stderr" {
		t.Fatalf("waitForLog: %+v %v", wl, err)
	}
	wp, err := d.c.WaitForPort(ctx, "it-procs", "web", api.WaitPortRequest{Port: 8001, Mode: "http", Path: "/", TimeoutMs: 20000})
	if err != nil || wp.StatusCode != 200 {
		t.Fatalf("waitForPort: %+v %v", wp, err)
	}
	t.Logf("start → port ready: %s", time.Since(t0).Round(time.Millisecond))
	list, err := d.c.ListProcesses(ctx, "it-procs", "")
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// A process that exits before it is ready fails fast, with a distinct
	// error, never a timeout.
	if _, err := d.c.StartProcess(ctx, "it-procs", api.StartProcessRequest{Command: "echo bye; exit 3", ID: "quitter"}); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	_, err = d.c.WaitForPort(ctx, "it-procs", "quitter", api.WaitPortRequest{Port: 9999, Mode: "tcp", TimeoutMs: 60000})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || time.Since(t1) > 30*time.Second {
		t.Fatalf("exited-before-ready: %v after %s", err, time.Since(t1))
	}
	// Kill takes the whole tree, including a child that ignores SIGTERM.
	if _, err := d.c.StartProcess(ctx, "it-procs", api.StartProcessRequest{Command: "sh -c 'trap \"\" TERM; sleep 300' & sleep 300", ID: "tree"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := d.c.KillProcess(ctx, "it-procs", "tree", client.KillOptions{Signal: "TERM", Grace: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "it-procs", "ps -eo args | grep -c '^sleep 300' || true"); strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("processes of the killed tree remain: %q", r.Stdout)
	}
	if n, err := d.c.KillAllProcesses(ctx, "it-procs", client.KillOptions{}); err != nil || n < 1 {
		t.Fatalf("kill all: %d %v", n, err)
	}
}

func TestSessionsAndWatch(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-sess"})
	if _, err := d.c.CreateSession(ctx, "it-sess", api.CreateSessionRequest{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.SessionExec(ctx, "it-sess", "s1", api.ExecRequest{Command: "mkdir -p /tmp/w && cd /tmp/w && export GREETING=hi"}); err != nil {
		t.Fatal(err)
	}
	r, err := d.c.SessionExec(ctx, "it-sess", "s1", api.ExecRequest{Command: "pwd; echo $GREETING"})
	if err != nil || r.Stdout != "/tmp/w\nhi\n" {
		t.Fatalf("session state: %+v %v", r, err)
	}
	// Watch: established before the call returns, so a file made right
	// after is seen.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	events := make(chan api.WatchEvent, 16)
	started := make(chan struct{})
	go func() {
		_ = d.c.Watch(wctx, "it-sess", "/tmp/w", client.WatchOptions{Recursive: true}, func(e api.WatchEvent) error {
			if e.Type == "watching" {
				close(started)
			}
			events <- e
			return nil
		})
	}()
	select {
	case <-started:
	case <-wctx.Done():
		t.Fatal("watch not established")
	}
	run(t, "it-sess", "echo x > /tmp/w/new.txt")
	for {
		select {
		case e := <-events:
			if e.Type == "event" && e.EventType == "create" && e.Path == "/tmp/w/new.txt" {
				return
			}
		case <-wctx.Done():
			t.Fatal("no create event for /tmp/w/new.txt")
		}
	}
}

// TestDevLoopLatency reports the figures the dev-loop issue asks for,
// through the public API and a real sandbox: start-process to first log
// byte, and PTY keystroke to echo. It asserts only that they work.
func TestDevLoopLatency(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-lat"})
	var firsts []time.Duration
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		p, err := d.c.StartProcess(ctx, "it-lat", api.StartProcessRequest{Command: "echo hi"})
		if err != nil {
			t.Fatal(err)
		}
		fw := &firstWrite{}
		if _, err := d.c.StreamProcessLogs(ctx, "it-lat", p.ID, fw, io.Discard); err != nil {
			t.Fatal(err)
		}
		if fw.at.IsZero() {
			t.Fatal("no output from echo hi")
		}
		firsts = append(firsts, fw.at.Sub(t0))
	}
	t.Logf("startProcess → first log byte: p50 %s", median(firsts))

	conn, err := d.c.AttachTerminal(ctx, "it-lat", "lat", 80, 24)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	readUntil := func(want string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var got strings.Builder
		for !strings.Contains(got.String(), want) {
			typ, b, err := conn.Read(rctx)
			if err != nil {
				t.Fatalf("terminal read (have %q): %v", got.String(), err)
			}
			if typ == websocket.MessageBinary {
				got.Write(b)
			}
		}
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("stty -echo; PS1=; echo ready\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("ready")
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("stty echo; cat\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	var rtts []time.Duration
	for i := 0; i < 50; i++ {
		k := string(rune('a' + i%26))
		t0 := time.Now()
		if err := conn.Write(ctx, websocket.MessageBinary, []byte(k)); err != nil {
			t.Fatal(err)
		}
		readUntil(k)
		rtts = append(rtts, time.Since(t0))
	}
	t.Logf("PTY keystroke → echo: p50 %s", median(rtts))
}

type firstWrite struct{ at time.Time }

func (f *firstWrite) Write(p []byte) (int, error) {
	if f.at.IsZero() && len(p) > 0 {
		f.at = time.Now()
	}
	return len(p), nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Microsecond)
}

package nodetest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
)

// Option adjusts Run.
type Option func(*config)

type config struct {
	start   node.StartOptions
	agent   bool
	exec    bool
	timeout time.Duration
}

// WithStartOptions is what the suite's sandboxes start with (the image, an
// instance size); the default is the zero StartOptions.
func WithStartOptions(o node.StartOptions) Option { return func(c *config) { c.start = o } }

// WithoutAgent skips the checks that need the sandbox's agent (files kept
// over a stop, Agent on a stopped sandbox), for a node that has none.
func WithoutAgent() Option { return func(c *config) { c.agent = false } }

// WithoutExec skips the checks that run commands (and those that need an
// agent), for a test double that models only the lifecycle: the control
// plane's own fakes check their lifecycle against the real contract.
func WithoutExec() Option { return func(c *config) { c.exec, c.agent = false, false } }

// WithTimeout bounds each check (default 2 minutes: a real node's first
// start unpacks an image).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// Run checks that the node newNode returns keeps the node.Node contract.
// newNode is called once per check; its sandboxes are destroyed when the
// check ends. Commands run in the sandbox with sh.
func Run(t *testing.T, newNode func(t *testing.T) node.Node, opts ...Option) {
	cfg := config{agent: true, exec: true, timeout: 2 * time.Minute}
	for _, o := range opts {
		o(&cfg)
	}
	checks := []struct {
		name  string
		exec  bool
		agent bool
		f     func(t *testing.T, s *suite)
	}{
		{"Info", false, false, testInfo},
		{"StatusOfMissing", false, false, testStatusMissing},
		{"InvalidName", false, false, testInvalidName},
		{"StartStopDestroy", false, false, testLifecycle},
		{"ExecCodesAndOutput", true, false, testExecCodes},
		{"ExecStreams", true, false, testExecStreams},
		{"ExecKill", true, false, testExecKill},
		{"ExecMissing", true, false, testExecMissing},
		{"FilesSurviveStop", true, true, testFilesSurviveStop},
		{"AgentOfStoppedDoesNotWake", true, true, testAgentNoWake},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.exec && !cfg.exec {
				t.Skip("the node under test runs no commands (WithoutExec)")
			}
			if c.agent && !cfg.agent {
				t.Skip("the node under test has no agent (WithoutAgent)")
			}
			ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
			defer cancel()
			s := &suite{n: newNode(t), ctx: ctx, cfg: cfg}
			c.f(t, s)
		})
	}
}

type suite struct {
	n   node.Node
	ctx context.Context
	cfg config
}

// sandbox starts a new sandbox, destroyed when the check ends.
func (s *suite) sandbox(t *testing.T) string {
	t.Helper()
	name := newName()
	if err := s.n.Start(s.ctx, name, s.cfg.start); err != nil {
		t.Fatalf("Start(%s): %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.n.Destroy(ctx, name, "nodetest"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("cleanup: Destroy(%s): %v", name, err)
		}
	})
	return name
}

func newName() string {
	var b [5]byte
	rand.Read(b[:])
	return "nt-" + hex.EncodeToString(b[:])
}

func (s *suite) status(t *testing.T, name string) node.Status {
	t.Helper()
	st, err := s.n.Status(s.ctx, name)
	if err != nil {
		t.Fatalf("Status(%s): %v", name, err)
	}
	return st
}

func testInfo(t *testing.T, s *suite) {
	in, err := s.n.Info(s.ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if in.ID == "" {
		t.Errorf("Info.ID is empty: %+v", in)
	}
	if in.Capacity.VCPU <= 0 || in.Capacity.MemoryMiB <= 0 {
		t.Errorf("Info reports no capacity: %+v", in.Capacity)
	}
	if in.Capacity.Sandboxes < 0 || in.Capacity.InFlight < 0 {
		t.Errorf("Info.Capacity counts below zero: %+v", in.Capacity)
	}
	if _, err := s.n.Images(s.ctx); err != nil {
		t.Errorf("Images: %v", err)
	}
}

func testStatusMissing(t *testing.T, s *suite) {
	st, err := s.n.Status(s.ctx, newName())
	if err != nil {
		t.Fatalf("Status of a missing sandbox: %v, want no error and Exists false", err)
	}
	if st.Exists || st.Running {
		t.Fatalf("Status of a missing sandbox = %+v, want Exists and Running false", st)
	}
}

func testInvalidName(t *testing.T, s *suite) {
	for _, bad := range []string{"", "Bad_Name", "../etc", strings.Repeat("a", 64)} {
		if _, err := s.n.Status(s.ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Status(%q) = %v, want invalid argument", bad, err)
		}
		if err := s.n.Destroy(s.ctx, bad, "nodetest"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Destroy(%q) = %v, want invalid argument", bad, err)
		}
	}
}

func testLifecycle(t *testing.T, s *suite) {
	name := s.sandbox(t)
	if st := s.status(t, name); !st.Exists || !st.Running {
		t.Fatalf("after Start: %+v, want existing and running", st)
	}
	stopped, err := s.n.Stop(s.ctx, name, node.StopOptions{Reason: "nodetest"})
	if err != nil || !stopped {
		t.Fatalf("Stop = %v, %v; want true, nil", stopped, err)
	}
	if st := s.status(t, name); !st.Exists || st.Running {
		t.Fatalf("after Stop: %+v, want existing and not running", st)
	}
	if stopped, err := s.n.Stop(s.ctx, name, node.StopOptions{Reason: "nodetest"}); err != nil || stopped {
		t.Fatalf("second Stop = %v, %v; want false, nil", stopped, err)
	}
	if err := s.n.Start(s.ctx, name, s.cfg.start); err != nil {
		t.Fatalf("Start (wake): %v", err)
	}
	if st := s.status(t, name); !st.Running {
		t.Fatalf("after wake: %+v, want running", st)
	}
	if err := s.n.Destroy(s.ctx, name, "nodetest"); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if st := s.status(t, name); st.Exists {
		t.Fatalf("after Destroy: %+v, want Exists false", st)
	}
	if err := s.n.Destroy(s.ctx, name, "nodetest"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second Destroy = %v, want not found", err)
	}
	if _, err := s.n.Stop(s.ctx, name, node.StopOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Stop after Destroy = %v, want not found", err)
	}
}

// run execs argv and returns its output and code, reading stdout to its
// end before stderr (a node must not block on an unread stream).
func (s *suite) run(t *testing.T, name string, o node.ExecOptions, argv ...string) (string, string, int) {
	t.Helper()
	p, err := s.n.Exec(s.ctx, name, argv, o)
	if err != nil {
		t.Fatalf("Exec(%q): %v", argv, err)
	}
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatalf("Exec(%q): reading stdout: %v", argv, err)
	}
	errOut, err := io.ReadAll(p.Stderr())
	if err != nil {
		t.Fatalf("Exec(%q): reading stderr: %v", argv, err)
	}
	code, err := p.Wait(s.ctx)
	if err != nil {
		t.Fatalf("Exec(%q): Wait: %v", argv, err)
	}
	return string(out), string(errOut), code
}

func testExecCodes(t *testing.T, s *suite) {
	name := s.sandbox(t)
	// Lots of stderr before stdout ends: a node that blocks on the
	// unread stream deadlocks here.
	out, errOut, code := s.run(t, name, node.ExecOptions{},
		"sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo "stderr line $i" >&2; i=$((i+1)); done; echo out; exit 3`)
	if out != "out\n" || code != 3 {
		t.Errorf("exec: stdout %q code %d, want \"out\\n\" and 3", out, code)
	}
	if n := strings.Count(errOut, "\n"); n != 2000 || !strings.HasPrefix(errOut, "stderr line 0\n") {
		t.Errorf("exec: stderr has %d lines (want 2000), starts %q", n, errOut[:min(len(errOut), 40)])
	}
	out, _, code = s.run(t, name, node.ExecOptions{Env: map[string]string{"NODETEST_X": "y z"}, Stdin: []byte("from stdin")},
		"sh", "-c", `printf '%s|' "$NODETEST_X"; cat`)
	if out != "y z|from stdin" || code != 0 {
		t.Errorf("exec with env and stdin: %q code %d, want \"y z|from stdin\" and 0", out, code)
	}
	// Only Wait, never reading: the output must not block the command.
	p, err := s.n.Exec(s.ctx, name, []string{"sh", "-c", "head -c 300000 /dev/zero; exit 7"}, node.ExecOptions{})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if code, err := p.Wait(s.ctx); err != nil || code != 7 {
		t.Errorf("Wait without reading = %d, %v; want 7, nil", code, err)
	}
}

func testExecStreams(t *testing.T, s *suite) {
	name := s.sandbox(t)
	start := time.Now()
	p, err := s.n.Exec(s.ctx, name, []string{"sh", "-c", "echo first; sleep 30; echo last"}, node.ExecOptions{})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	defer p.Kill()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "first\n" {
			t.Fatalf("first line = %q, want \"first\\n\"", l)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("the first line arrived %s after the exec began: output is buffered", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the first line did not arrive while the command ran: output is buffered")
	}
	wctx, cancel := context.WithTimeout(s.ctx, 100*time.Millisecond)
	defer cancel()
	if code, err := p.Wait(wctx); err == nil {
		t.Fatalf("Wait returned %d before the command ended", code)
	}
}

func testExecKill(t *testing.T, s *suite) {
	name := s.sandbox(t)
	p, err := s.n.Exec(s.ctx, name, []string{"sh", "-c", "echo up; sleep 60; echo never"}, node.ExecOptions{})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if l, _ := bufio.NewReader(p.Stdout()).ReadString('\n'); l != "up\n" {
		t.Fatalf("first line = %q", l)
	}
	start := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	wctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	code, err := p.Wait(wctx)
	if errors.Is(err, context.DeadlineExceeded) && wctx.Err() != nil {
		t.Fatalf("Wait did not return %s after Kill", time.Since(start))
	}
	if err == nil && code == 0 {
		t.Fatalf("a killed exec reports success (code 0)")
	}
	// The sandbox is still usable.
	if out, _, code := s.run(t, name, node.ExecOptions{}, "echo", "after"); out != "after\n" || code != 0 {
		t.Fatalf("exec after Kill: %q code %d", out, code)
	}
}

// testExecMissing: not found, from Exec or (a node that starts the
// command in the background, as the local one does) from Wait.
func testExecMissing(t *testing.T, s *suite) {
	p, err := s.n.Exec(s.ctx, newName(), []string{"true"}, node.ExecOptions{})
	if err == nil {
		_, err = p.Wait(s.ctx)
	}
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Exec on a missing sandbox = %v, want not found", err)
	}
}

func testFilesSurviveStop(t *testing.T, s *suite) {
	name := s.sandbox(t)
	const path, body = "nodetest-kept.txt", "written before the stop\n"
	ag, release, err := s.n.Agent(s.ctx, name)
	if err != nil {
		t.Fatalf("Agent: %v", err)
	}
	if err := ag.WriteFile(s.ctx, path, strings.NewReader(body), 0o644); err != nil {
		release()
		t.Fatalf("WriteFile: %v", err)
	}
	release()
	if stopped, err := s.n.Stop(s.ctx, name, node.StopOptions{Reason: "nodetest"}); err != nil || !stopped {
		t.Fatalf("Stop = %v, %v", stopped, err)
	}
	if err := s.n.Start(s.ctx, name, s.cfg.start); err != nil {
		t.Fatalf("Start (wake): %v", err)
	}
	ag, release, err = s.n.Agent(s.ctx, name)
	if err != nil {
		t.Fatalf("Agent after wake: %v", err)
	}
	defer release()
	rc, err := ag.ReadFile(s.ctx, path)
	if err != nil {
		t.Fatalf("ReadFile after wake: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != body {
		t.Fatalf("file after wake = %q, %v; want %q", got, err, body)
	}
}

func testAgentNoWake(t *testing.T, s *suite) {
	name := s.sandbox(t)
	if stopped, err := s.n.Stop(s.ctx, name, node.StopOptions{Reason: "nodetest"}); err != nil || !stopped {
		t.Fatalf("Stop = %v, %v", stopped, err)
	}
	if _, release, err := s.n.Agent(s.ctx, name); err == nil {
		release()
		t.Fatal("Agent of a stopped sandbox succeeded")
	}
	if st := s.status(t, name); st.Running {
		t.Fatalf("Agent woke the stopped sandbox: %+v", st)
	}
	if _, _, err := s.n.Agent(s.ctx, newName()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Agent of a missing sandbox = %v, want not found", err)
	}
}

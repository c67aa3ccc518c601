package agent_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ptEventually polls cond until it holds or the deadline passes.
func ptEventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ptAlive reports whether pid runs (zombies count as dead).
func ptAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i > 0 && i+2 < len(data) && data[i+2] != 'Z'
}

func ptCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ptStart(t *testing.T, c *agentclient.Client, req api.StartProcessRequest) api.ProcessInfo {
	t.Helper()
	p, err := c.StartProcess(ptCtx(t), req)
	if err != nil {
		t.Fatalf("start %q: %v", req.Command, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.KillProcess(ctx, p.ID, agentclient.KillOptions{Signal: "KILL"})
	})
	return p
}

func TestProcessLifecycle(t *testing.T) {
	a, c := newClient(t)
	ctx := ptCtx(t)
	p := ptStart(t, c, api.StartProcessRequest{ID: "job-1", Command: "echo out; echo err >&2; exit 3"})
	if p.ID != "job-1" || p.PID <= 0 || p.Status != api.ProcessRunning || p.Command == "" || p.StartedAt.IsZero() || p.Cwd != a.Home {
		t.Fatalf("handle %+v", p)
	}
	if _, err := c.StartProcess(ctx, api.StartProcessRequest{ID: "job-1", Command: "true"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := c.StartProcess(ctx, api.StartProcessRequest{ID: "../x", Command: "true"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
	done, err := c.WaitForExit(ctx, p.ID, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != api.ProcessFailed || done.ExitCode == nil || *done.ExitCode != 3 || done.EndedAt == nil {
		t.Fatalf("ended %+v", done)
	}
	logs, err := c.ProcessLogs(ctx, p.ID)
	if err != nil || string(logs.Stdout) != "out\n" || string(logs.Stderr) != "err\n" {
		t.Fatalf("logs %q %q %v", logs.Stdout, logs.Stderr, err)
	}
	ok := ptStart(t, c, api.StartProcessRequest{Command: "exit 0"})
	if in, err := c.WaitForExit(ctx, ok.ID, 30*time.Second); err != nil || in.Status != api.ProcessCompleted || *in.ExitCode != 0 {
		t.Fatalf("completed: %+v %v", in, err)
	}
	list, err := c.ListProcesses(ctx, "")
	if err != nil || len(list) != 2 || list[0].ID != "job-1" || list[1].ID != ok.ID {
		t.Fatalf("list %+v %v", list, err)
	}
	got, err := c.GetProcess(ctx, "job-1")
	if err != nil || got.Status != api.ProcessFailed {
		t.Fatalf("get %+v %v", got, err)
	}
	if _, err := c.GetProcess(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := c.StartProcess(ctx, api.StartProcessRequest{Command: "true", Cwd: "/nonexistent"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad cwd: %v", err)
	}
	if _, err := c.WaitForExit(ctx, ptStart(t, c, api.StartProcessRequest{Command: "sleep 100"}).ID, 50*time.Millisecond); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("wait-exit timeout: %v", err)
	}
	// The process's own timeout kills it and says why.
	tp := ptStart(t, c, api.StartProcessRequest{Command: "sleep 100", TimeoutMs: 50})
	if in, err := c.WaitForExit(ctx, tp.ID, 30*time.Second); err != nil || in.Status != api.ProcessKilled || !strings.Contains(in.Error, "timeout") {
		t.Fatalf("process timeout: %+v %v", in, err)
	}
}

func TestProcessKillTreeEscalates(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	// A child that leaves the process group and ignores SIGTERM: only the
	// tree walk reaches it, and only SIGKILL ends it.
	p := ptStart(t, c, api.StartProcessRequest{
		Command: `setsid sh -c 'trap "" TERM; echo child=$$; while :; do sleep 1; done' & wait`,
	})
	m, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: `child=(\d+)`, Regex: true, TimeoutMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(m.Groups[1])
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	grace := 1500 * time.Millisecond
	start := time.Now()
	type res struct {
		in  api.ProcessInfo
		err error
	}
	ch := make(chan res, 1)
	go func() {
		in, err := c.KillProcess(ctx, p.ID, agentclient.KillOptions{Grace: grace})
		ch <- res{in, err}
	}()
	// The main process dies of SIGTERM at once; the child must still be
	// there while the grace period runs (it ignored SIGTERM), and so the
	// record stays running (issue 12 item 8).
	time.Sleep(grace / 3)
	if in, err := c.GetProcess(ctx, p.ID); time.Since(start) < grace && (err != nil || in.Status != api.ProcessRunning) {
		t.Fatalf("during the grace period, with the child alive: %+v %v", in, err)
	}
	if time.Since(start) < grace && !ptAlive(child) {
		t.Fatal("the SIGTERM-ignoring child died before the grace period ended")
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if time.Since(start) < grace {
		t.Fatalf("kill returned after %v, before the %v grace period", time.Since(start), grace)
	}
	if r.in.Status != api.ProcessKilled || r.in.Signal != "SIGKILL" || r.in.ExitCode == nil || *r.in.ExitCode != 137 {
		t.Fatalf("killed process (its tree ended by SIGKILL): %+v", r.in)
	}
	if ptAlive(child) {
		t.Fatal("the record ended while the child still ran")
	}

	// A process that honours SIGTERM does not wait for the grace period.
	q := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000"})
	start = time.Now()
	in, err := c.KillProcess(ctx, q.ID, agentclient.KillOptions{Grace: 50 * time.Second})
	if err != nil || in.Status != api.ProcessKilled {
		t.Fatalf("kill: %+v %v", in, err)
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Fatalf("kill of a cooperative process took %v", d)
	}
	// A non-terminating signal is delivered and nothing else.
	u := ptStart(t, c, api.StartProcessRequest{Command: `trap 'echo got-usr1' USR1; while :; do sleep 0.05; done`})
	if _, err := c.KillProcess(ctx, u.ID, agentclient.KillOptions{Signal: "USR1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitForLog(ctx, u.ID, api.WaitLogRequest{Pattern: "got-usr1", TimeoutMs: 20000}); err != nil {
		t.Fatal(err)
	}
	if in, _ := c.GetProcess(ctx, u.ID); in.Status != api.ProcessRunning {
		t.Fatalf("after USR1: %+v", in)
	}
	if _, err := c.KillProcess(ctx, u.ID, agentclient.KillOptions{Signal: "BOGUS"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bogus signal: %v", err)
	}
}

func TestProcessKillAll(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	a := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000"})
	b := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000"})
	ptStart(t, c, api.StartProcessRequest{Command: "true"})
	n, err := c.KillAllProcesses(ctx, agentclient.KillOptions{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The third may or may not have exited already.
	if n < 2 || n > 3 {
		t.Fatalf("killed %d", n)
	}
	for _, id := range []string{a.ID, b.ID} {
		if in, _ := c.GetProcess(ctx, id); in.Status != api.ProcessKilled {
			t.Fatalf("%s: %+v", id, in)
		}
	}
}

// heapAfterGC returns the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func TestProcessLogRingBounded(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	const flood = 50 << 20
	floodRetains := func(limit int64) (uint64, api.ProcessLogs) {
		before := heapAfterGC()
		p := ptStart(t, c, api.StartProcessRequest{Command: "yes | head -c " + strconv.Itoa(flood), LogBufferBytes: limit})
		if in, err := c.WaitForExit(ctx, p.ID, 50*time.Second); err != nil || in.Status != api.ProcessCompleted {
			t.Fatalf("flood: %+v %v", in, err)
		}
		var grew uint64
		if after := heapAfterGC(); after > before {
			grew = after - before
		}
		logs, err := c.ProcessLogs(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		return grew, logs
	}
	// Negative control: with a 64 MiB buffer the whole flood is retained,
	// so the heap probe can see retention.
	grew, logs := floodRetains(64 << 20)
	if int64(len(logs.Stdout)) != flood || grew < flood/2 {
		t.Fatalf("negative control: kept %d bytes, heap grew %d; the probe cannot see retention", len(logs.Stdout), grew)
	}
	logs = api.ProcessLogs{} // the control's process keeps its logs; only growth counts
	grew, logs = floodRetains(1 << 20)
	if len(logs.Stdout) != 1<<20 || logs.DroppedStdout != flood-1<<20 {
		t.Fatalf("kept %d bytes, dropped %d", len(logs.Stdout), logs.DroppedStdout)
	}
	if !bytes.HasSuffix(logs.Stdout, []byte("y\ny\n")) {
		t.Fatalf("the ring must keep the newest output")
	}
	if grew > 8<<20 {
		t.Fatalf("heap grew by %d bytes for a 1 MiB log buffer", grew)
	}
}

// ptSyncBuffer is a bytes.Buffer safe for a writer and a poller.
type ptSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *ptSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *ptSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProcessLogStreamReplayFollowExit(t *testing.T) {
	a, c := newClient(t)
	ctx := ptCtx(t)
	gate := filepath.Join(a.Dir, "gate")
	p := ptStart(t, c, api.StartProcessRequest{
		Command: `echo first; echo warn >&2; while [ ! -e ` + gate + ` ]; do sleep 0.01; done; printf second; exit 7`,
	})
	if _, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: "warn", TimeoutMs: 20000}); err != nil {
		t.Fatal(err)
	}
	var out, errb ptSyncBuffer
	type res struct {
		es  api.ExitStatus
		err error
	}
	ch := make(chan res, 1)
	go func() {
		es, err := c.StreamProcessLogs(ctx, p.ID, &out, &errb)
		ch <- res{es, err}
	}()
	ptEventually(t, 10*time.Second, "replayed output", func() bool { return out.String() == "first\n" && errb.String() == "warn\n" })
	select {
	case r := <-ch:
		t.Fatalf("stream ended while the process runs: %+v", r)
	default:
	}
	os.WriteFile(gate, nil, 0o644)
	r := <-ch
	if r.err != nil || r.es.ExitCode != 7 {
		t.Fatalf("stream end: %+v %v", r.es, r.err)
	}
	if out.String() != "first\nsecond" {
		t.Fatalf("followed output %q", out.String())
	}
	// A stream of an ended process replays and ends with the same status.
	var again bytes.Buffer
	es, err := c.StreamProcessLogs(ctx, p.ID, &again, nil)
	if err != nil || es.ExitCode != 7 || again.String() != "first\nsecond" {
		t.Fatalf("replay of ended process: %q %+v %v", again.String(), es, err)
	}
}

func TestProcessWaitForLog(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	p := ptStart(t, c, api.StartProcessRequest{Command: `echo booting; echo "server listening on port 8123" >&2; printf 'tail-no-newline'; sleep 1000`})
	m, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: "listening", TimeoutMs: 20000})
	if err != nil || m.Line != "server listening on port 8123" || m.Stream != "stderr" || m.Groups != nil {
		t.Fatalf("string match: %+v %v", m, err)
	}
	m, err = c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: `on port (\d+)$`, Regex: true, TimeoutMs: 20000})
	if err != nil || len(m.Groups) != 2 || m.Groups[1] != "8123" {
		t.Fatalf("regex match: %+v %v", m, err)
	}
	if _, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: "never", TimeoutMs: 100}); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
	if _, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: "(", Regex: true}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad regex: %v", err)
	}
	// A process that exits first fails fast with a distinct error, even
	// with no timeout at all; its last line without a newline is matched.
	q := ptStart(t, c, api.StartProcessRequest{Command: "echo nope; printf last-words; exit 4"})
	start := time.Now()
	_, err = c.WaitForLog(ctx, q.ID, api.WaitLogRequest{Pattern: "ready"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || errors.Is(err, errdefs.ErrDeadlineExceeded) ||
		!strings.Contains(err.Error(), "process "+q.ID+" exited with code 4 before it was ready") {
		t.Fatalf("exited before ready: %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatal("exited-before-ready was not fast")
	}
	if m, err := c.WaitForLog(ctx, q.ID, api.WaitLogRequest{Pattern: "last-words"}); err != nil || m.Line != "last-words" {
		t.Fatalf("final partial line: %+v %v", m, err)
	}
}

func ptFreePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestProcessWaitForPort(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	_, c := newClient(t)
	ctx := ptCtx(t)
	port := ptFreePort(t)
	p := ptStart(t, c, api.StartProcessRequest{Command: "exec python3 -m http.server " + strconv.Itoa(port) + " --bind 127.0.0.1"})
	res, err := c.WaitForPort(ctx, p.ID, api.WaitPortRequest{Port: port, IntervalMs: 20, TimeoutMs: 30000})
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("http: %+v %v", res, err)
	}
	if _, err := c.WaitForPort(ctx, p.ID, api.WaitPortRequest{Port: port, Mode: "tcp", TimeoutMs: 30000}); err != nil {
		t.Fatalf("tcp: %v", err)
	}
	// A status outside the range is not ready: a missing path is 404.
	if _, err := c.WaitForPort(ctx, p.ID, api.WaitPortRequest{Port: port, Path: "/missing", IntervalMs: 20, TimeoutMs: 200}); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("404 must not be ready: %v", err)
	}
	if res, err := c.WaitForPort(ctx, p.ID, api.WaitPortRequest{Port: port, Path: "/missing", StatusMin: 404, TimeoutMs: 30000}); err != nil || res.StatusCode != 404 {
		t.Fatalf("explicit 404: %+v %v", res, err)
	}
	// Nothing listens: timeout.
	idle := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000"})
	if _, err := c.WaitForPort(ctx, idle.ID, api.WaitPortRequest{Port: ptFreePort(t), Mode: "tcp", IntervalMs: 20, TimeoutMs: 200}); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("tcp timeout: %v", err)
	}
	// The process exits before it listens: distinct, fast, no timeout.
	dead := ptStart(t, c, api.StartProcessRequest{Command: "exit 5"})
	_, err = c.WaitForPort(ctx, dead.ID, api.WaitPortRequest{Port: ptFreePort(t), IntervalMs: 20})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "exited with code 5 before it was ready") {
		t.Fatalf("exited before ready: %v", err)
	}
	if _, err := c.WaitForPort(ctx, dead.ID, api.WaitPortRequest{Port: 0}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("port 0: %v", err)
	}
}

// TestProcessStartToFirstByte measures the time from StartProcess to the
// first byte of `echo hi` on the log stream. It asserts nothing about
// speed; it reports.
func TestProcessStartToFirstByte(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	var samples []time.Duration
	for i := 0; i < 30; i++ {
		start := time.Now()
		p, err := c.StartProcess(ctx, api.StartProcessRequest{Command: "echo hi"})
		if err != nil {
			t.Fatal(err)
		}
		var first time.Duration
		w := ptFirstWrite(func() {
			if first == 0 {
				first = time.Since(start)
			}
		})
		es, err := c.StreamProcessLogs(ctx, p.ID, w, nil)
		if err != nil || es.ExitCode != 0 || first == 0 {
			t.Fatalf("%+v %v", es, err)
		}
		samples = append(samples, first)
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	t.Logf("startProcess → first log byte of `echo hi`: p50 %v, p90 %v, min %v (n=%d)",
		samples[len(samples)/2], samples[len(samples)*9/10], samples[0], len(samples))
}

type ptFirstWrite func()

func (f ptFirstWrite) Write(p []byte) (int, error) {
	if f != nil {
		f()
	}
	return len(p), nil
}

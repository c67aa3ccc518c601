package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// The negative control's PID 1 (see TestPID1ReapsOrphans): it runs a script
// and waits for that one child, as exec.Cmd.Wait does, but never reaps the
// orphans the script leaves.
func TestMain(m *testing.M) {
	if script := os.Getenv("BERTH_TEST_NOREAP_INIT"); script != "" {
		exec.Command("/bin/sh", "-c", script).Run()
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	// runc hands the agent only fds 0-2, and the agent refuses to start
	// with more. Whatever this test binary inherited (from a shell or CI
	// runner) must not reach the agents it starts, as runc guarantees.
	if err := agent.CloseOnExecInherited(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if agentBin != "" {
		os.RemoveAll(filepath.Dir(agentBin))
	}
	os.Exit(code)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the agent as PID 1 of a new pid namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1) from util-linux")
	}
}

var (
	buildOnce sync.Once
	agentBin  string
	buildErr  error
)

// buildAgent builds the static agent binary once per test run.
func buildAgent(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "berth-agent-bin")
		if err != nil {
			buildErr = err
			return
		}
		agentBin = filepath.Join(dir, "berth-agent")
		// berthtest: the negative controls pass --no-fd-check, which
		// only that build has (testflags_berthtest.go).
		cmd := exec.Command("go", "build", // go test puts its own GOROOT/bin first on PATH
			"-tags", "berthtest", "-ldflags", "-s -w -X main.Version=test-1.2.3", "-o", agentBin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return agentBin
}

// nsProc is a process tree running as PID 1 of its own pid namespace.
type nsProc struct {
	cmd     *exec.Cmd
	initPid int // host pid of the namespace's PID 1
	done    chan struct{}
	err     error
}

// nsInit starts argv as PID 1 of a new pid namespace (with its own /proc),
// under unshare(1), and kills the namespace when the test ends.
func nsInit(t *testing.T, env []string, extra []*os.File, argv ...string) *nsProc {
	t.Helper()
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc"}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = extra
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nsProc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	waitFor(t, "the namespace's PID 1 to start", func() bool {
		if c := children(cmd.Process.Pid); len(c) == 1 {
			p.initPid = c[0].pid
			return true
		}
		return false
	})
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			// unshare is still waiting for PID 1, so initPid is still
			// ours: killing it ends the whole namespace.
			syscall.Kill(p.initPid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("namespace stderr:\n%s", stderr.String())
		}
	})
	return p
}

type proc struct {
	pid   int
	state byte
	comm  string
}

// children lists the processes whose parent is ppid, from the host's /proc.
func children(ppid int) []proc {
	var out []proc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		open, close := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(data[close+2:]))
		if len(f) < 2 {
			continue
		}
		if pp, _ := strconv.Atoi(f[1]); pp == ppid {
			out = append(out, proc{pid: pid, state: f[0][0], comm: string(data[open+1 : close])})
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// orphanScript leaves n orphans (shells in a subshell that exits at once)
// that wait for the gate file and then exit, becoming zombies of PID 1
// unless PID 1 reaps them.
func orphanScript(n int, gate string) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do (sh -c 'while [ ! -e %s ]; do sleep 0.02; done' >/dev/null 2>&1 </dev/null &); i=$((i+1)); done`, n, gate)
}

// orphansOf counts the orphan shells (live and zombie) parented to pid.
func orphansOf(pid int) (live, zombies int) {
	for _, p := range children(pid) {
		if p.state == 'Z' {
			zombies++
		} else if p.comm == "sh" {
			live++
		}
	}
	return
}

func startAgent(t *testing.T, extra ...*os.File) (*agentclient.Client, *nsProc, int, string) {
	t.Helper()
	return startAgentArgs(t, extra)
}

func startAgentArgs(t *testing.T, extra []*os.File, args ...string) (*agentclient.Client, *nsProc, int, string) {
	t.Helper()
	bin := buildAgent(t)
	dir, err := os.MkdirTemp("", "bap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	start := time.Now()
	ns := nsInit(t, nil, extra, append([]string{bin, "--socket", sock, "--sudo-socket", filepath.Join(dir, "sudo.sock"), "--default-user", "no-such-user-here"}, args...)...)
	c := agentclient.New(sock)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent ready %v after unshare started", time.Since(start))
	return c, ns, ns.initPid, dir
}

func execOut(t *testing.T, c *agentclient.Client, req api.ExecRequest) (string, api.ExitStatus) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := c.Exec(context.Background(), req, &out, &errb)
	if err != nil {
		t.Fatalf("exec %+v: %v (stderr %q)", req, err, errb.String())
	}
	return out.String(), st
}

func TestPID1ReapsOrphans(t *testing.T) {
	requireRoot(t)
	c, _, agentPid, dir := startAgent(t)

	h, err := c.Health(context.Background())
	if err != nil || h.Version != "test-1.2.3" {
		t.Fatalf("health %+v %v", h, err)
	}
	if out, _ := execOut(t, c, api.ExecRequest{Argv: []string{"cat", "/proc/1/comm"}}); out != "berth-agent\n" {
		t.Fatalf("PID 1 is %q, not the agent", out)
	}
	if rss := vmRSS(agentPid); rss > 0 {
		t.Logf("agent RSS after start and two requests: %d KiB", rss)
	}

	const n = 5
	gate := filepath.Join(dir, "gate")
	if _, st := execOut(t, c, api.ExecRequest{Command: orphanScript(n, gate)}); st.ExitCode != 0 {
		t.Fatalf("orphan script: %+v", st)
	}
	// The orphans are re-parented to the agent (else the test proves
	// nothing), then released; none may stay a zombie.
	waitFor(t, "the orphans to be re-parented to the agent", func() bool { live, _ := orphansOf(agentPid); return live == n })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent to reap every orphan", func() bool { return len(children(agentPid)) == 0 })
}

// TestNonReapingInitLeavesZombies is the negative control for
// TestPID1ReapsOrphans: with a PID 1 that does not reap, the same probe
// sees the zombies.
func TestNonReapingInitLeavesZombies(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	const n = 5
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	initPid := nsInit(t, []string{"BERTH_TEST_NOREAP_INIT=" + orphanScript(n, gate)}, nil, self).initPid
	waitFor(t, "the orphans to be re-parented", func() bool { live, _ := orphansOf(initPid); return live == n })
	os.WriteFile(gate, nil, 0o644)
	waitFor(t, "zombies under a non-reaping PID 1", func() bool { _, z := orphansOf(initPid); return z == n })
}

func TestPID1ExecAsNobody(t *testing.T) {
	requireRoot(t)
	c, _, _, _ := startAgent(t)
	out, _ := execOut(t, c, api.ExecRequest{Command: "id -u; id -g; pwd", User: "nobody"})
	if out != "65534\n65534\n/\n" {
		t.Fatalf("as nobody: %q", out)
	}
	// The default user does not exist here, so it falls back to root.
	if out, _ := execOut(t, c, api.ExecRequest{Argv: []string{"id", "-u"}}); out != "0\n" {
		t.Fatalf("default user fallback: %q", out)
	}
}

func TestPID1ForwardsSIGTERM(t *testing.T) {
	requireRoot(t)
	c, ns, agentPid, _ := startAgent(t)
	type result struct {
		st  api.ExitStatus
		err error
	}
	res := make(chan result, 1)
	go func() {
		st, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"sleep", "1000"}}, nil, nil)
		res <- result{st, err}
	}()
	waitFor(t, "sleep to start", func() bool {
		for _, p := range children(agentPid) {
			if p.comm == "sleep" {
				return true
			}
		}
		return false
	})
	start := time.Now()
	if err := syscall.Kill(agentPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || r.st.Signal != "SIGTERM" || r.st.ExitCode != 143 {
		t.Fatalf("exec during shutdown: %+v %v", r.st, r.err)
	}
	select {
	case <-ns.done:
		if ns.err != nil { // unshare exits with PID 1's status
			t.Fatalf("agent exit: %v", ns.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not exit after SIGTERM")
	}
	t.Logf("SIGTERM to exit: %v", time.Since(start))
}

// TestPID1SealsInheritedFds is checklist #12: a descriptor the agent
// inherited (the runc fd-leak class, CVE-2024-21626) makes it refuse to
// start, naming the descriptor. Negative control: with --no-fd-check the
// same leak reaches user commands.
func TestPID1SealsInheritedFds(t *testing.T) {
	requireRoot(t)
	canary, err := os.Create(filepath.Join(t.TempDir(), "leak-canary"))
	if err != nil {
		t.Fatal(err)
	}
	defer canary.Close()
	bin := buildAgent(t)
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", bin, "--socket", filepath.Join(t.TempDir(), "b.sock"), "--sudo-socket", filepath.Join(t.TempDir(), "s.sock"))
	cmd.ExtraFiles = []*os.File{canary}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to start") || !strings.Contains(string(out), "leak-canary") {
		t.Fatalf("agent with a leaked fd: err %v, output %q; want a refusal naming it", err, out)
	}
	c, _, _, _ := startAgentArgs(t, []*os.File{canary}, "--no-fd-check")
	if out, _ := execOut(t, c, api.ExecRequest{Command: "readlink /proc/$$/fd/3"}); !strings.HasSuffix(out, "leak-canary\n") {
		t.Fatalf("negative control: without the check the command should hold the canary as fd 3, got %q", out)
	}
}

func vmRSS(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return 0
}

// TestChildrenStartWithDefaultSignals: an agent started with SIGHUP and
// SIGPIPE ignored (under nohup, as a test run or a supervisor may start
// berth) still starts commands with their default actions, so a kill -HUP
// ends a command as users expect. Negative control: the same nohup without
// the agent in between passes the ignored SIGHUP on, so the harness does
// produce what the agent has to undo.
func TestChildrenStartWithDefaultSignals(t *testing.T) {
	requireRoot(t)
	ignored := func(status string) (uint64, error) {
		for _, line := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
				return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			}
		}
		return 0, fmt.Errorf("no SigIgn line in %q", status)
	}
	bit := func(sig syscall.Signal) uint64 { return 1 << (uint(sig) - 1) } // SigIgn's bit of sig
	hup, pipe := bit(syscall.SIGHUP), bit(syscall.SIGPIPE)
	out, err := exec.Command("nohup", "cat", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	if mask, err := ignored(string(out)); err != nil || mask&hup == 0 {
		t.Fatalf("negative control: nohup cat should ignore SIGHUP: mask %x %v", mask, err)
	}
	bin := buildAgent(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	nsInit(t, nil, nil, "nohup", bin, "--socket", sock, "--sudo-socket", filepath.Join(dir, "sudo.sock"), "--default-user", "no-such-user-here")
	c := agentclient.New(sock)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	status, _ := execOut(t, c, api.ExecRequest{Argv: []string{"cat", "/proc/self/status"}})
	mask, err := ignored(status)
	if err != nil {
		t.Fatal(err)
	}
	if mask&(hup|pipe) != 0 {
		t.Fatalf("a command started by an agent that inherited ignored SIGHUP/SIGPIPE ignores them too: SigIgn %x", mask)
	}
}

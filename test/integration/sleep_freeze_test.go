//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// The freeze sleep tier on real runc (issue 16): processes, terminals,
// process records and code contexts continue across freeze and thaw, a
// frozen sandbox uses no CPU, the freeze survives a daemon restart, and it
// escalates to stop on schedule and under memory pressure. Each check has
// a negative control: the same probes on a stop-tier sandbox see
// everything lost, the same sandbox unfrozen uses CPU, the escalation has
// not happened before its time or within budget.

// hostCgroup is the file of sandbox id's cgroup v1 controller ctrl (this
// hybrid host's layout; runc's cgroupsPath is /<run dir's name>/<id>).
func hostCgroup(ctrl, id, file string) string {
	return filepath.Join("/sys/fs/cgroup", ctrl, filepath.Base(itRunDir), id, file)
}

func readHost(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func readHostInt(t *testing.T, path string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(readHost(t, path), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// runcStatus is what runc state says of id ("paused", "running", …).
func runcStatus(t *testing.T, id string) string {
	t.Helper()
	out, err := execCmd(filepath.Join(binDir, "runc"), "--root", filepath.Join(itRunDir, "runc"), "state", id)
	if err != nil {
		t.Fatalf("runc state %s: %v\n%s", id, err, out)
	}
	m := regexp.MustCompile(`"status":\s*"([a-z]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("runc state %s: no status in %s", id, out)
	}
	return m[1]
}

// sleepFrozen puts name to sleep and checks that it sleeps in the freeze
// tier with its cgroup frozen and runc reporting it paused.
func sleepFrozen(t *testing.T, name string) api.Sandbox {
	t.Helper()
	if err := d.c.Sleep(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	sb, err := d.c.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateSleeping || sb.SleepTier != api.SleepFreeze || sb.FrozenAt == nil {
		t.Fatalf("after sleep: state %q tier %q frozenAt %v, want sleeping in the freeze tier", sb.State, sb.SleepTier, sb.FrozenAt)
	}
	if s := readHost(t, hostCgroup("freezer", sb.ID, "freezer.state")); s != "FROZEN" {
		t.Fatalf("freezer.state of %s is %q, want FROZEN", name, s)
	}
	if s := runcStatus(t, sb.ID); s != "paused" {
		t.Fatalf("runc state of frozen %s: %q, want paused", name, s)
	}
	return sb
}

// Probes of what a sandbox holds in memory.
const (
	// dictServer holds a ~60 MB dict and answers each TCP connection with
	// its length, a digest of its content and a token drawn at start.
	dictServer = `exec python3 -c '
import hashlib, os, socket
d = {i: ("%07d" % i) * 28 for i in range(250000)}
tok = os.urandom(8).hex()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8101)); s.listen(8)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    h = hashlib.sha256()
    for k in sorted(d): h.update(d[k].encode())
    c.sendall(("%d %s %s" % (len(d), h.hexdigest(), tok)).encode()); c.close()
'`
	dictProbe    = `python3 -c 'import socket; s = socket.create_connection(("127.0.0.1", 8101), timeout=30); print(s.recv(4096).decode())'`
	counterSrv   = `exec node -e 'const t = require("crypto").randomBytes(8).toString("hex"); let n = 0; require("http").createServer((q, r) => r.end(t + " " + (++n))).listen(8102, "127.0.0.1", () => console.log("ready"))'`
	counterProbe = `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8102/", timeout=30).read().decode())'`
)

// heldState is what one sandbox holds before it sleeps.
type heldState struct {
	dict      string // the dict server's answer
	counter   string // the counter's token
	count     int    // the counter's last value
	termPid   int    // the terminal's shell
	sleepPid  string // the `sleep` the terminal runs
	procs     map[string]int
	codeCtxID string
}

// holdState starts everything the freeze tests check in sandbox name.
func holdState(t *testing.T, name string) heldState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var h heldState
	for id, cmd := range map[string]string{"dict": dictServer, "counter": counterSrv} {
		if _, err := d.c.StartProcess(ctx, name, api.StartProcessRequest{ID: id, Command: cmd}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.WaitForLog(ctx, name, id, api.WaitLogRequest{Pattern: "ready", TimeoutMs: 120000}); err != nil {
			t.Fatalf("%s in %s: %v", id, name, err)
		}
	}
	h.dict = strings.TrimSpace(run(t, name, dictProbe).Stdout)
	if f := strings.Fields(h.dict); len(f) != 3 || f[0] != "250000" {
		t.Fatalf("dict server of %s: %q", name, h.dict)
	}
	for i := 1; i <= 3; i++ {
		f := strings.Fields(run(t, name, counterProbe).Stdout)
		if len(f) != 2 || f[1] != strconv.Itoa(i) {
			t.Fatalf("counter of %s: %q, want %d", name, f, i)
		}
		h.counter, h.count = f[0], i
	}
	list, err := d.c.ListProcesses(ctx, name, "")
	if err != nil {
		t.Fatal(err)
	}
	h.procs = map[string]int{}
	for _, p := range list {
		h.procs[p.ID] = p.PID
	}
	cc, err := d.c.CreateCodeContext(ctx, name, api.CreateCodeContextRequest{Language: api.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	h.codeCtxID = cc.ID
	if res, err := d.c.RunCode(ctx, name, api.RunCodeRequest{Context: cc.ID, Code: "berth_x = 6 * 7000"}, nil); err != nil || res.Error != nil {
		t.Fatalf("run code: %+v %v", res, err)
	}
	out := terminalSay(t, name, "export BERTH_V=kept-$((6*7)); sleep 600 & echo SPID=$!", regexp.MustCompile(`SPID=(\d+)`))
	h.sleepPid = regexp.MustCompile(`SPID=(\d+)`).FindStringSubmatch(out)[1]
	terms, err := d.c.ListTerminals(ctx, name)
	if err != nil || len(terms) != 1 {
		t.Fatalf("terminals: %+v %v", terms, err)
	}
	h.termPid = terms[0].Pid
	return h
}

// terminalSay attaches to terminal "sh1" of name (creating it), types
// line and reads until want matches the output; it returns the output,
// scrollback included.
func terminalSay(t *testing.T, name, line string, want *regexp.Regexp) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := d.c.AttachTerminal(ctx, name, "sh1", 120, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageBinary, []byte(line+"\n")); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for !want.MatchString(got.String()) {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("terminal of %s: read (have %q): %v", name, got.String(), err)
		}
		if typ == websocket.MessageBinary {
			got.Write(b)
		}
	}
	conn.Close(websocket.StatusNormalClosure, "")
	return got.String()
}

// lostState lists what of h name no longer holds, after a wake.
func lostState(t *testing.T, name string, h heldState) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var lost []string
	if r := run(t, name, dictProbe); strings.TrimSpace(r.Stdout) != h.dict {
		lost = append(lost, fmt.Sprintf("dict server answers %q (exit %d), want %q", r.Stdout, r.ExitCode, h.dict))
	}
	if f := strings.Fields(run(t, name, counterProbe).Stdout); len(f) != 2 || f[0] != h.counter || f[1] != strconv.Itoa(h.count+1) {
		lost = append(lost, fmt.Sprintf("counter answers %q, want %s %d", f, h.counter, h.count+1))
	}
	list, err := d.c.ListProcesses(ctx, name, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range list {
		if pid, ok := h.procs[p.ID]; ok && pid == p.PID && p.Status == "running" {
			seen[p.ID] = true
		}
	}
	for id := range h.procs {
		if !seen[id] {
			lost = append(lost, "process record "+id+" gone, or another pid, or not running")
		}
	}
	res, err := d.c.RunCode(ctx, name, api.RunCodeRequest{Context: h.codeCtxID, Code: "berth_x"}, nil)
	if err != nil || res.Error != nil || mainText(res) != "42000" {
		lost = append(lost, fmt.Sprintf("code context %s: %+v %v", h.codeCtxID, res.Error, err))
	}
	terms, err := d.c.ListTerminals(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(terms) != 1 || terms[0].ID != "sh1" || terms[0].Pid != h.termPid || !terms[0].Running {
		lost = append(lost, fmt.Sprintf("terminal sh1 (pid %d): %+v", h.termPid, terms))
	}
	out := terminalSay(t, name, "echo V=[$BERTH_V]; kill -0 "+h.sleepPid+" && echo ALIVE-$((1+1)); echo DONE-$((2+2))", regexp.MustCompile(`DONE-4`))
	if !strings.Contains(out, "SPID="+h.sleepPid) {
		lost = append(lost, "terminal scrollback lost")
	}
	if !strings.Contains(out, "V=[kept-42]") {
		lost = append(lost, "shell variable lost")
	}
	if !strings.Contains(out, "ALIVE-2") {
		lost = append(lost, "the terminal's sleep "+h.sleepPid+" is gone")
	}
	return lost
}

// TestFreezeKeepsProcesses: a frozen sandbox wakes with a Python process
// holding a large dict, a Node server's in-memory counter, an interactive
// shell (variable, running sleep, scrollback), its process records and a
// code context's variable; destroying a frozen sandbox leaves nothing.
// Negative control: a stop-tier sandbox loses all of it.
func TestFreezeKeepsProcesses(t *testing.T) {
	before := takeCensus(t)
	sandbox(t, api.CreateSandboxRequest{Name: "it-frz", Sleep: api.SleepFreeze})
	sandbox(t, api.CreateSandboxRequest{Name: "it-frz-stop", Sleep: api.SleepStop})
	if r := run(t, "it-frz", "command -v node"); r.ExitCode != 0 {
		t.Fatalf("no node in the default image: %+v", r)
	}
	held := holdState(t, "it-frz")
	heldStop := holdState(t, "it-frz-stop")

	sb := sleepFrozen(t, "it-frz")
	// The freeze tier's memory meter reads the v1 memory controller: it
	// holds the dict (well over 30 MiB).
	if u := readHostInt(t, hostCgroup("memory", sb.ID, "memory.usage_in_bytes")); u < 30<<20 {
		t.Fatalf("memory.usage_in_bytes of the frozen sandbox: %d", u)
	}
	if err := d.c.Sleep(context.Background(), "it-frz-stop"); err != nil {
		t.Fatal(err)
	}
	if sbs, _ := d.c.Get(context.Background(), "it-frz-stop"); sbs.SleepTier != api.SleepStop {
		t.Fatalf("stop-tier sandbox sleeps in %q", sbs.SleepTier)
	}
	time.Sleep(time.Second)

	if lost := lostState(t, "it-frz", held); len(lost) > 0 {
		t.Fatalf("after freeze and thaw:\n%s", strings.Join(lost, "\n"))
	}
	woke, err := d.c.Get(context.Background(), "it-frz")
	if err != nil || woke.State != api.StateRunning || woke.LastWake != "thaw" || woke.SleepTier != "" {
		t.Fatalf("after the wake: %+v %v", woke, err)
	}
	if s := readHost(t, hostCgroup("freezer", sb.ID, "freezer.state")); s != "THAWED" {
		t.Fatalf("freezer.state after the wake: %q", s)
	}
	lost := lostState(t, "it-frz-stop", heldStop)
	if len(lost) < 6 {
		t.Fatalf("negative control: a stop-tier sandbox kept what a stop loses; lost only:\n%s", strings.Join(lost, "\n"))
	}

	// Destroying a frozen sandbox leaves no cgroup, mount, veth, netns or
	// container behind.
	sleepFrozen(t, "it-frz")
	if err := d.c.Sleep(context.Background(), "it-frz-stop"); err != nil {
		t.Fatal(err)
	}
	frozenCensus := takeCensus(t)
	if equalCensus(before, frozenCensus) {
		t.Fatal("census cannot see the frozen sandbox")
	}
	for _, n := range []string{"it-frz", "it-frz-stop"} {
		if err := d.c.Destroy(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	after := takeCensus(t)
	if !equalCensus(before, after) {
		t.Fatalf("a destroyed frozen sandbox left resources:\nbefore %+v\nafter  %+v", before, after)
	}
	if _, err := os.Stat(filepath.Dir(hostCgroup("freezer", sb.ID, "x"))); !os.IsNotExist(err) {
		t.Fatalf("freezer cgroup of the destroyed sandbox: %v", err)
	}
}

// TestFreezeCostsNoCPU: a busy-looping sandbox, frozen, accrues no CPU
// time over 10 s (under 10 ms); the negative control is the same sandbox
// running, which accrues at least 0.05 core-s/s even on a busy host.
func TestFreezeCostsNoCPU(t *testing.T) {
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-frz-cpu", Sleep: api.SleepFreeze,
		Resources: &api.Resources{VCPU: 1, MemoryMiB: 1024, DiskMB: 4000}})
	ctx := context.Background()
	if _, err := d.c.StartProcess(ctx, "it-frz-cpu", api.StartProcessRequest{ID: "spin", Command: "while :; do :; done"}); err != nil {
		t.Fatal(err)
	}
	usage := hostCgroup("cpuacct", sb.ID, "cpuacct.usage")
	time.Sleep(time.Second)
	u0, t0 := readHostInt(t, usage), time.Now()
	time.Sleep(5 * time.Second)
	running := float64(readHostInt(t, usage)-u0) / 1e9 / time.Since(t0).Seconds()
	t.Logf("running, busy loop: %.3f core-s/s", running)
	// The machine is shared: the loop gets what is left of it (0.2 to 0.75
	// core-s/s seen). At 0.05 it still accrues 50 times the frozen bound.
	if running < 0.05 {
		t.Fatalf("negative control: the busy loop used %.3f core-s/s; the meter does not see it", running)
	}
	sleepFrozen(t, "it-frz-cpu")
	u0, t0 = readHostInt(t, usage), time.Now()
	time.Sleep(10 * time.Second)
	used := readHostInt(t, usage) - u0
	t.Logf("frozen: %d ns of CPU over %s", used, time.Since(t0).Round(time.Millisecond))
	if used > 10e6 {
		t.Fatalf("a frozen sandbox used %.3f core-s over 10 s", float64(used)/1e9)
	}
	// It spins again after the wake.
	run(t, "it-frz-cpu", "true")
	u0 = readHostInt(t, usage)
	time.Sleep(2 * time.Second)
	if readHostInt(t, usage)-u0 < 100e6 {
		t.Fatal("the busy loop did not continue after the thaw")
	}
}

// restartDaemon restarts the suite's daemon with extra serve flags (kill
// -9 when crash is set) and restores the plain daemon when the test ends.
func restartDaemon(t *testing.T, crash bool, args ...string) {
	t.Helper()
	if crash {
		d.kill9()
	} else {
		d.stop()
	}
	var err error
	if d, err = startDaemon(nil, args...); err != nil {
		t.Fatal(err)
	}
	if len(args) > 0 {
		t.Cleanup(func() {
			d.stop()
			var err error
			if d, err = startDaemon(nil); err != nil {
				t.Errorf("restart the suite daemon: %v", err)
			}
		})
	}
}

func journalHas(t *testing.T, name, op, detail string) bool {
	t.Helper()
	j, err := d.c.Journal(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range j {
		if e.Op == op && strings.Contains(e.Detail, detail) {
			return true
		}
	}
	return false
}

// counterNext asks name's counter server and checks token and value.
func counterNext(t *testing.T, name, token string, want int) string {
	t.Helper()
	f := strings.Fields(run(t, name, counterProbe).Stdout)
	if len(f) != 2 || (token != "" && f[0] != token) || f[1] != strconv.Itoa(want) {
		t.Fatalf("counter of %s: %q, want token %q value %d", name, f, token, want)
	}
	return f[0]
}

func startCounter(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := d.c.StartProcess(ctx, name, api.StartProcessRequest{ID: "counter", Command: counterSrv}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.WaitForLog(ctx, name, "counter", api.WaitLogRequest{Pattern: "ready", TimeoutMs: 120000}); err != nil {
		t.Fatal(err)
	}
	return counterNext(t, name, "", 1)
}

// TestFreezeAcrossDaemonRestart: a frozen sandbox stays frozen and
// sleeping over a daemon crash (runc reports it paused; reconcile adopts
// it) and wakes with its processes; one thawed behind berth's back while
// the daemon was down is frozen again at reconcile.
func TestFreezeAcrossDaemonRestart(t *testing.T) {
	sandbox(t, api.CreateSandboxRequest{Name: "it-frz-rs", Sleep: api.SleepFreeze})
	tok := startCounter(t, "it-frz-rs")
	sb := sleepFrozen(t, "it-frz-rs")
	restartDaemon(t, true)
	got, err := d.c.Get(context.Background(), "it-frz-rs")
	if err != nil || got.State != api.StateSleeping || got.SleepTier != api.SleepFreeze {
		t.Fatalf("after the restart: %+v %v", got, err)
	}
	if s := readHost(t, hostCgroup("freezer", sb.ID, "freezer.state")); s != "FROZEN" {
		t.Fatalf("freezer.state after the restart: %q", s)
	}
	if !journalHas(t, "it-frz-rs", "adopt", "(frozen)") {
		t.Fatal("journal has no frozen adopt")
	}
	counterNext(t, "it-frz-rs", tok, 2)
	if got, _ := d.c.Get(context.Background(), "it-frz-rs"); got.LastWake != "thaw" {
		t.Fatalf("wake after the restart: lastWake %q", got.LastWake)
	}

	// Thawed behind berth's back while it is down: frozen again.
	sleepFrozen(t, "it-frz-rs")
	d.kill9()
	if err := os.WriteFile(hostCgroup("freezer", sb.ID, "freezer.state"), []byte("THAWED"), 0); err != nil {
		t.Fatal(err)
	}
	if s := runcStatus(t, sb.ID); s != "running" {
		t.Fatalf("negative control: runc state of the thawed container: %q", s)
	}
	restartDaemon(t, false)
	if s := readHost(t, hostCgroup("freezer", sb.ID, "freezer.state")); s != "FROZEN" {
		t.Fatalf("freezer.state after reconcile of a thawed frozen sandbox: %q", s)
	}
	counterNext(t, "it-frz-rs", tok, 3)
}

// waitTier polls until name sleeps in tier, or fails after limit.
func waitTier(t *testing.T, name, tier string, limit time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		sb, err := d.c.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == api.StateSleeping && sb.SleepTier == tier {
			return time.Since(t0)
		}
		if time.Since(t0) > limit {
			t.Fatalf("%s: state %q tier %q after %s, want sleeping in %q", name, sb.State, sb.SleepTier, limit, tier)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFreezeEscalatesOnSchedule: with --freeze-max 4s a frozen sandbox
// stops after 4 s (not before), keeps its files, loses its processes, and
// the journal says why.
func TestFreezeEscalatesOnSchedule(t *testing.T) {
	restartDaemon(t, false, "--freeze-max", "4s")
	sandbox(t, api.CreateSandboxRequest{Name: "it-frz-esc", Sleep: api.SleepFreeze})
	run(t, "it-frz-esc", "echo kept > /home/user/keep.txt")
	tok := startCounter(t, "it-frz-esc")
	sleepFrozen(t, "it-frz-esc")
	time.Sleep(2 * time.Second)
	if sb, _ := d.c.Get(context.Background(), "it-frz-esc"); sb.SleepTier != api.SleepFreeze {
		t.Fatalf("negative control: escalated before the freeze max: tier %q", sb.SleepTier)
	}
	took := waitTier(t, "it-frz-esc", api.SleepStop, 30*time.Second)
	t.Logf("escalated %s after the 2 s check", took)
	if !journalHas(t, "it-frz-esc", "escalate", "freeze max 4s") {
		t.Fatal("journal does not say why it escalated")
	}
	if r := run(t, "it-frz-esc", "cat /home/user/keep.txt"); strings.TrimSpace(r.Stdout) != "kept" {
		t.Fatalf("files after escalation: %+v", r)
	}
	if r := run(t, "it-frz-esc", counterProbe); r.ExitCode == 0 && strings.Contains(r.Stdout, tok) {
		t.Fatalf("the counter survived a stop: %q", r.Stdout)
	}
}

// TestFreezeEscalatesUnderMemoryPressure: with a frozen-memory budget
// that fits one of two sandboxes, freezing the second stops the oldest
// frozen and keeps the newer frozen. The budget is far below the
// sandboxes' memory limits, so this also shows the cgroup's usage was
// read (at the limit both would stop).
func TestFreezeEscalatesUnderMemoryPressure(t *testing.T) {
	hog := "exec python3 -c 'import time; b = b\"x\" * (80 << 20); print(\"ready\", flush=True); time.sleep(100000)'"
	var usage [2]int64
	for i, n := range []string{"it-frz-old", "it-frz-new"} {
		sb := sandbox(t, api.CreateSandboxRequest{Name: n, Sleep: api.SleepFreeze})
		if _, err := d.c.StartProcess(context.Background(), n, api.StartProcessRequest{ID: "hog", Command: hog}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.WaitForLog(context.Background(), n, "hog", api.WaitLogRequest{Pattern: "ready", TimeoutMs: 60000}); err != nil {
			t.Fatal(err)
		}
		usage[i] = readHostInt(t, hostCgroup("memory", sb.ID, "memory.usage_in_bytes"))
	}
	lo, hi := min(usage[0], usage[1]), max(usage[0], usage[1])
	budget := (hi + lo/2) >> 20
	t.Logf("usage %d and %d MiB; budget %d MiB", usage[0]>>20, usage[1]>>20, budget)
	restartDaemon(t, false, "--freeze-memory", strconv.FormatInt(budget, 10))
	sleepFrozen(t, "it-frz-old")
	time.Sleep(2 * time.Second) // ten alarm ticks
	if sb, _ := d.c.Get(context.Background(), "it-frz-old"); sb.SleepTier != api.SleepFreeze {
		t.Fatalf("negative control: one frozen sandbox within budget escalated: tier %q", sb.SleepTier)
	}
	sleepFrozen(t, "it-frz-new")
	waitTier(t, "it-frz-old", api.SleepStop, 20*time.Second)
	time.Sleep(2 * time.Second)
	if sb, _ := d.c.Get(context.Background(), "it-frz-new"); sb.SleepTier != api.SleepFreeze {
		t.Fatalf("the newer frozen sandbox escalated too: tier %q", sb.SleepTier)
	}
	if !journalHas(t, "it-frz-old", "escalate", "freeze memory budget") {
		t.Fatal("journal does not say why it escalated")
	}
}

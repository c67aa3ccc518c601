//go:build adversarial

package adversarial

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/testdaemon"
	"github.com/berth-sh/berth/internal/weaken"
)

var (
	advID     = os.Getenv("BERTH_IT_ID")
	advBridge = "berthadv" + advID
	advSubnet = "10.22" + advDigit() + ".0.0/16"
	advRunDir = "/run/berth-adv" + advID
)

func advDigit() string {
	if len(advID) == 1 && advID[0] >= '1' && advID[0] <= '9' {
		return advID
	}
	return "0"
}

var (
	binDir     string
	poolClaims atomic.Int64 // probe sandboxes that were claimed pool members (BERTH_ADV_POOL)
	dataDir    string
	probeBin   string // the static probe, built once
	d          *daemonProc
	canaries   map[string]string // path -> sha256 of its content
	hostHashes map[string]string
	isolation  string // BERTH_ADV_ISOLATION: "" (the daemon's default) or e.g. "gvisor"
)

// probePath is where the probe lives inside each sandbox.
const probePath = "/home/user/probe"

type daemonProc struct {
	*testdaemon.Daemon
	proc   *os.Process
	listen string
	c      *client.Client
	weak   string
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("adversarial tests need root; skipping")
		os.Exit(0)
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	binDir = os.Getenv("BERTH_BIN")
	if binDir == "" {
		binDir, _ = filepath.Abs("../../bin")
	}
	// The negative controls need a berthtest build (weaken switches).
	if err := testdaemon.CheckTestBuild(binDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// BERTH_ADV_ISOLATION=gvisor runs every sandbox under that isolation
	// (scripts/test.sh runs a subset so); a daemon without the flag skips.
	if isolation = os.Getenv("BERTH_ADV_ISOLATION"); isolation != "" {
		help, _ := exec.Command(filepath.Join(binDir, "berth"), "serve", "--help").CombinedOutput()
		if !strings.Contains(string(help), "--default-isolation") {
			fmt.Println("this berth has no --default-isolation; skipping the", isolation, "run")
			return 0
		}
	}
	dataDir = os.Getenv("BERTH_ADV_DATA")
	if dataDir == "" {
		dataDir = "/var/tmp/berth-adv" + advID
	}
	tmp, err := os.MkdirTemp("", "berth-adv-probe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	probeBin = filepath.Join(tmp, "probe")
	build := exec.Command("go", "build", "-trimpath", "-o", probeBin, "./probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build probe: %v\n%s", err, out)
		return 1
	}
	// Host canaries: one under /etc, one beside the data dir. Their hashes
	// (and the host binaries' hashes) must not change in any test.
	canaries = map[string]string{
		"/etc/berth-adv-canary" + advID:                                "",
		filepath.Join(filepath.Dir(dataDir), "berth-adv-canary"+advID): "",
	}
	for p := range canaries {
		if err := os.WriteFile(p, []byte("host canary "+p), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		canaries[p] = hashFile(p)
		defer os.Remove(p)
	}
	hostHashes = map[string]string{}
	for _, b := range []string{"berth", "berth-agent", "runc"} {
		hostHashes[filepath.Join(binDir, b)] = hashFile(filepath.Join(binDir, b))
	}
	if d, err = startDaemon(""); err != nil {
		fmt.Fprintln(os.Stderr, "start daemon:", err)
		return 1
	}
	defer func() { d.stop() }()
	if err := ensureBaseImage(d.c); err != nil {
		fmt.Fprintln(os.Stderr, "base image:", err)
		return 1
	}
	destroyAll(d.c)
	code := m.Run()
	destroyAll(d.c)
	// With a pool, the run means something only if probes ran on claimed
	// members: a pool that never served (a claim rule that stopped
	// matching the suite's creates) must fail the run, not pass it cold.
	if n := os.Getenv("BERTH_ADV_POOL"); n != "" {
		fmt.Printf("pool run: %d probe sandboxes were claimed warm-pool members\n", poolClaims.Load())
		if poolClaims.Load() == 0 && code == 0 {
			fmt.Fprintf(os.Stderr, "FAIL: BERTH_ADV_POOL=%s but no probe sandbox was a claimed pool member\n", n)
			code = 1
		}
	}
	for p, h := range canaries {
		if got := hashFile(p); got != h {
			fmt.Fprintf(os.Stderr, "FAIL: host canary %s changed (%s -> %s)\n", p, h, got)
			code = 1
		}
	}
	for p, h := range hostHashes {
		if got := hashFile(p); got != h {
			fmt.Fprintf(os.Stderr, "FAIL: host binary %s changed\n", p)
			code = 1
		}
	}
	return code
}

func hashFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func destroyAll(c *client.Client) {
	ctx := context.Background()
	if list, err := c.List(ctx, "", nil); err == nil {
		for _, s := range list {
			_ = c.Destroy(ctx, s.Name)
		}
	}
}

func startDaemon(weak string) (*daemonProc, error) {
	logPath := filepath.Join(os.TempDir(), "berth-adv"+advID+"-daemon.log")
	if f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, "=== start daemon %s=%q\n", weaken.EnvVar, weak)
		f.Close()
	}
	var args []string
	if isolation != "" {
		args = append(args, "--default-isolation", isolation)
	}
	// BERTH_ADV_POOL=N keeps a warm pool of N sandboxes of the default
	// image, so that the probes run on claimed pool members (issue 15;
	// scripts/test.sh runs the posture and isolation probes so, and the
	// run fails if no probe sandbox was a claimed member).
	if n := os.Getenv("BERTH_ADV_POOL"); n != "" {
		args = append(args, "--pool", "debian-trixie="+n)
	}
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, weaken.EnvVar+"=") {
			env = append(env, e)
		}
	}
	if weak != "" {
		env = append(env, weaken.EnvVar+"="+weak)
	}
	td, err := testdaemon.Start(testdaemon.Options{
		Bin: binDir, Data: dataDir, RunDir: advRunDir, Bridge: advBridge, Subnet: advSubnet,
		// User namespace ids disjoint from the integration suites' and
		// from another adversarial suite's.
		UserNSBase: 1<<30 + uint32(advDigit()[0]-'0')<<24,
		Args:       args, Env: env, Log: logPath,
	})
	if err != nil {
		return nil, err
	}
	return &daemonProc{Daemon: td, proc: td.Process, listen: td.Listen, c: td.Client, weak: weak}, nil
}

func (p *daemonProc) stop() { p.Stop() }

func ensureBaseImage(c *client.Client) error {
	return testdaemon.EnsureBase(c, func(format string, args ...any) { fmt.Printf(format+"\n", args...) })
}

// withWeakened restarts the daemon with the named protections switched off
// (a comma list of internal/weaken names), runs fn against it, destroys
// every sandbox fn created, and restarts the fully protected daemon. This
// is how each negative control runs.
func withWeakened(t *testing.T, switches string, fn func()) {
	t.Helper()
	t.Logf("negative control: daemon with %s=%s", weaken.EnvVar, switches)
	before := map[string]bool{}
	if list, err := d.c.List(context.Background(), "", nil); err == nil {
		for _, s := range list {
			before[s.Name] = true
		}
	}
	d.stop()
	var err error
	if d, err = startDaemon(switches); err != nil {
		t.Fatalf("start weakened daemon: %v", err)
	}
	defer func() {
		ctx := context.Background()
		if list, err := d.c.List(ctx, "", nil); err == nil {
			for _, s := range list {
				if !before[s.Name] {
					_ = d.c.Destroy(ctx, s.Name)
				}
			}
		}
		d.stop()
		if d, err = startDaemon(""); err != nil {
			t.Fatalf("restart protected daemon: %v", err)
		}
	}()
	fn()
}

// sandbox creates a sandbox on the current daemon, installs the probe and
// destroys the sandbox when the test ends.
func sandbox(t *testing.T, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := d.c.Create(ctx, req)
	if err != nil {
		t.Fatalf("create %s: %v", req.Name, err)
	}
	t.Cleanup(func() {
		if err := d.c.Destroy(context.Background(), req.Name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Logf("destroy %s: %v", req.Name, err)
		}
	})
	if os.Getenv("BERTH_ADV_POOL") != "" {
		js, err := d.c.Journal(ctx, req.Name)
		if err != nil {
			t.Fatalf("journal of %s: %v", req.Name, err)
		}
		for _, j := range js {
			if j.Op == "start" {
				t.Logf("sandbox %s: start %s", req.Name, j.Detail)
				if strings.HasSuffix(j.Detail, "(warm pool)") {
					poolClaims.Add(1)
				}
			}
		}
	}
	f, err := os.Open(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := d.c.WriteFile(ctx, req.Name, probePath, f, 0o755); err != nil {
		t.Fatalf("install probe in %s: %v", req.Name, err)
	}
	return sb
}

// probe runs the probe in a sandbox as user and decodes its JSON verdict
// (the last line of stdout) into out.
func probe(t *testing.T, name, user string, out any, args ...string) api.ExecResult {
	t.Helper()
	res, err := d.c.Exec(context.Background(), name, api.ExecRequest{
		Argv: append([]string{probePath}, args...), User: user, TimeoutMs: 180000,
	})
	if err != nil {
		t.Fatalf("probe %v in %s: %v", args, name, err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	last := lines[len(lines)-1]
	if err := json.Unmarshal([]byte(last), out); err != nil {
		t.Fatalf("probe %v: bad verdict %q (exit %d, stderr %q)", args, last, res.ExitCode, res.Stderr)
	}
	return res
}

// run execs a shell command as root and fails the test on a berth error.
func run(t *testing.T, name, command string) api.ExecResult {
	t.Helper()
	res, err := d.c.Exec(context.Background(), name, api.ExecRequest{Command: command, User: "root", TimeoutMs: 120000})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", command, name, err)
	}
	return res
}

// checkCanaries fails the test if a host canary or host binary changed.
func checkCanaries(t *testing.T) {
	t.Helper()
	for p, h := range canaries {
		if got := hashFile(p); got != h {
			t.Fatalf("host canary %s changed", p)
		}
	}
	for p, h := range hostHashes {
		if got := hashFile(p); got != h {
			t.Fatalf("host binary %s changed", p)
		}
	}
}

// apiLatency times GET /v1/sandboxes in a loop until stop is called, and
// reports p50, p99 and max: the host API's health during an attack.
type apiLatency struct {
	stopc chan struct{}
	done  chan []time.Duration
}

func measureAPI() *apiLatency {
	a := &apiLatency{stopc: make(chan struct{}), done: make(chan []time.Duration, 1)}
	c := d.c
	go func() {
		var lat []time.Duration
		for {
			select {
			case <-a.stopc:
				a.done <- lat
				return
			default:
			}
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := c.List(ctx, "", nil)
			cancel()
			if err != nil {
				lat = append(lat, 30*time.Second)
			} else {
				lat = append(lat, time.Since(t0))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return a
}

// stop ends the measurement and logs the figures; it returns p99.
func (a *apiLatency) stop(t *testing.T, what string) time.Duration {
	t.Helper()
	close(a.stopc)
	lat := <-a.done
	if len(lat) == 0 {
		t.Fatalf("%s: no API requests measured", what)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	t.Logf("FIGURE %s: host API GET /v1/sandboxes during the attack: n=%d p50=%s p99=%s max=%s",
		what, len(lat), pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	return pct(0.99)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

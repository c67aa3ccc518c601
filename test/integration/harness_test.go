//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/testdaemon"
)

// The test daemon uses its own bridge, subnet, run dir and data dir, so it
// never touches a berth that runs on the same machine. BERTH_IT_ID (a digit)
// gives a second checkout its own set, so two suites can run side by side;
// its subnet is 10.21<ID>.0.0/16, 10.210 without an id. Each suite has its
// own prefix (adversarial 10.22x, compat 10.17x, this suite's egress world 10.18x;
// the cluster hub is 10.24x, network unit tests use 10.231) and no id shares a digit
// with the default, so a run with any id 1-9 never meets CI's.
var (
	itID     = os.Getenv("BERTH_IT_ID")
	itBridge = "berthit0" + itID
	itSubnet = "10.21" + itIDDigit() + ".0.0/16"
	itRunDir = "/run/berth-it" + itID
)

func itIDDigit() string {
	if len(itID) == 1 && itID[0] >= '1' && itID[0] <= '9' {
		return itID
	}
	return "0"
}

var (
	binDir  string
	dataDir string
	d       *daemonProc
)

type daemonProc struct {
	cmd           *exec.Cmd
	listen        string
	previewListen string
	c             *client.Client
	log           *os.File
}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("integration tests need root; skipping")
		os.Exit(0)
	}
	binDir = os.Getenv("BERTH_BIN")
	if binDir == "" {
		binDir, _ = filepath.Abs("../../bin")
	}
	// Failpoint and weakened-daemon tests need a berthtest build.
	if err := testdaemon.CheckTestBuild(binDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The data dir is kept between runs so the base image is built once
	// per machine; sandboxes from an earlier run are destroyed below.
	dataDir = os.Getenv("BERTH_IT_DATA")
	if dataDir == "" {
		dataDir = "/var/tmp/berth-it" + itID
	}
	var err error
	d, err = startDaemon(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start daemon:", err)
		os.Exit(1)
	}
	if err := ensureBaseImage(d.c); err != nil {
		fmt.Fprintln(os.Stderr, "base image:", err)
		d.stop()
		os.Exit(1)
	}
	ctx := context.Background()
	if list, err := d.c.List(ctx, "", nil); err == nil {
		for _, s := range list {
			_ = d.c.Destroy(ctx, s.Name)
		}
	}
	cleanArtifacts(ctx)
	code := m.Run()
	if d == nil { // a test's restart failed; it said so
		os.Exit(1)
	}
	if list, err := d.c.List(ctx, "", nil); err == nil {
		for _, s := range list {
			_ = d.c.Destroy(ctx, s.Name)
		}
	}
	d.stop()
	os.Exit(code)
}

func freePort() string { return testdaemon.FreePort() }

// startDaemon runs berth serve with extra environment (failpoints) and
// extra flags.
func startDaemon(env []string, args ...string) (*daemonProc, error) {
	listen := freePort()
	previewListen := freePort()
	logf, err := os.OpenFile(filepath.Join(os.TempDir(), "berth-it"+itID+"-daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(binDir, "berth"), "serve", "--listen", listen, "--data", dataDir,
		"--run-dir", itRunDir, "--preview-listen", previewListen, "--bridge", itBridge, "--subnet", itSubnet, "--alarm-tick", "200ms",
		// Disjoint user namespace ranges for suites running side by side.
		"--userns-base", strconv.Itoa(1<<29+int(itIDDigit()[0]-'0')<<24))
	// BERTH_IT_ISOLATION=gvisor runs every sandbox the suite creates under
	// gVisor (scripts/test.sh runs the core exec and files tests that way).
	if iso := os.Getenv("BERTH_IT_ISOLATION"); iso != "" {
		cmd.Args = append(cmd.Args, "--default-isolation", iso)
	}
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &daemonProc{cmd: cmd, listen: listen, previewListen: previewListen, log: logf}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + listen + "/v1/health"); err == nil {
			resp.Body.Close()
			var cc struct{ URL, APIKey string }
			b, err := os.ReadFile(filepath.Join(dataDir, "client.json"))
			if err == nil && json.Unmarshal(b, &cc) == nil {
				p.c = client.New("http://"+listen, cc.APIKey)
				return p, nil
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.kill9()
	return nil, fmt.Errorf("daemon did not become healthy; see %s", logf.Name())
}

// kill9 kills the daemon the way a crash would: no cleanup runs.
func (p *daemonProc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

func (p *daemonProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.kill9()
	}
	p.log.Close()
}

func ensureBaseImage(c *client.Client) error {
	return testdaemon.EnsureBase(c, func(format string, args ...any) { fmt.Printf(format+"\n", args...) })
}

// sandbox creates a sandbox for one test and destroys it afterwards.
func sandbox(t *testing.T, req api.CreateSandboxRequest) api.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, _, err := d.c.GetOrCreate(ctx, req)
	if err != nil {
		t.Fatalf("create %s: %v", req.Name, err)
	}
	t.Cleanup(func() {
		if err := d.c.Destroy(context.Background(), req.Name); err != nil {
			t.Logf("destroy %s: %v", req.Name, err)
		}
	})
	return sb
}

// run execs a shell command and fails the test on a berth error.
func run(t *testing.T, name, command string) api.ExecResult {
	t.Helper()
	res, err := d.c.Exec(context.Background(), name, api.ExecRequest{Command: command, TimeoutMs: 120000})
	if err != nil {
		t.Fatalf("exec %q in %s: %v", command, name, err)
	}
	return res
}

// census lists the host resources berth creates per sandbox, so tests can
// show that nothing is left behind.
type census struct {
	Netns, Veths, Mounts, Cgroups, Containers []string
}

func takeCensus(t *testing.T) census {
	t.Helper()
	var c census
	if ents, err := os.ReadDir(filepath.Join(itRunDir, "netns")); err == nil {
		for _, e := range ents {
			c.Netns = append(c.Netns, e.Name())
		}
	}
	out, _ := exec.Command("ip", "-o", "link", "show", "master", itBridge).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			c.Veths = append(c.Veths, strings.TrimSuffix(strings.Split(f[1], "@")[0], ":"))
		}
	}
	mi, _ := os.Open("/proc/self/mountinfo")
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 && (strings.HasPrefix(f[4], filepath.Join(dataDir, "sandboxes")) || strings.HasPrefix(f[4], itRunDir+"/")) {
			c.Mounts = append(c.Mounts, f[4])
		}
	}
	mi.Close()
	cgParent := filepath.Base(itRunDir)
	for _, ctrl := range []string{"memory", "pids", "cpu", "unified"} {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", ctrl, cgParent))
		for _, e := range ents {
			if e.IsDir() {
				c.Cgroups = append(c.Cgroups, ctrl+"/"+e.Name())
			}
		}
	}
	out, _ = exec.Command(filepath.Join(binDir, "runc"), "--root", filepath.Join(itRunDir, "runc"), "list", "-q").Output()
	c.Containers = strings.Fields(string(out))
	for _, l := range [][]string{c.Netns, c.Veths, c.Mounts, c.Cgroups, c.Containers} {
		sort.Strings(l)
	}
	return c
}

func readAllString(t *testing.T, rc io.ReadCloser, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func execCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// cleanArtifacts deletes snapshots and backups left by an earlier run.
// Snapshots that others stand on refuse deletion, so it sweeps a few times.
func cleanArtifacts(ctx context.Context) {
	for i := 0; i < 20; i++ {
		list, err := d.c.ListSnapshots(ctx, "", "")
		if err != nil || len(list) == 0 {
			break
		}
		for _, s := range list {
			_ = d.c.DeleteSnapshot(ctx, s.ID)
		}
	}
	if list, err := d.c.ListBackups(ctx, ""); err == nil {
		for _, b := range list {
			_ = d.c.DeleteBackup(ctx, b.ID)
		}
	}
}

func equalCensus(a, b census) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func readKey(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "api-key"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

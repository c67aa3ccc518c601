package testdaemon

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/image"
)

// Options say where and how one daemon runs.
type Options struct {
	Bin        string   // directory holding the berth binary
	Data       string   // --data
	RunDir     string   // --run-dir
	Bridge     string   // --bridge (also names the nftables table)
	Subnet     string   // --subnet
	UserNSBase uint32   // --userns-base; 0: the daemon's default
	Args       []string // more serve flags
	Env        []string // the whole environment; nil: this process's
	Log        string   // file the daemon's output is appended to
	// Netns, when set, runs the daemon in that named network namespace
	// (/run/netns/NAME, entered with nsenter: only the network namespace
	// changes, unlike ip netns exec, which remounts /sys and hides the
	// cgroup hierarchy). Listen and PreviewListen then name addresses in
	// it; without Netns they default to free loopback ports.
	Netns                 string
	Listen, PreviewListen string
}

// Daemon is one running `berth serve`.
type Daemon struct {
	Listen        string // API address (host:port)
	PreviewListen string
	Client        *client.Client
	APIKey        string
	Log           string
	Process       *os.Process

	exited chan struct{}
	logf   *os.File
}

// Start runs berth serve with o and returns once it answers /v1/health and
// has written its client.json, or with an error (the log names why).
func Start(o Options) (*Daemon, error) {
	logf, err := os.OpenFile(o.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if o.Listen == "" {
		o.Listen = FreePort()
	}
	if o.PreviewListen == "" {
		o.PreviewListen = FreePort()
	}
	d := &Daemon{Listen: o.Listen, PreviewListen: o.PreviewListen, Log: o.Log, exited: make(chan struct{}), logf: logf}
	args := []string{"serve", "--listen", d.Listen, "--preview-listen", d.PreviewListen, "--data", o.Data,
		"--run-dir", o.RunDir, "--bridge", o.Bridge, "--subnet", o.Subnet}
	if o.UserNSBase != 0 {
		args = append(args, "--userns-base", strconv.FormatUint(uint64(o.UserNSBase), 10))
	}
	args = append([]string{filepath.Join(o.Bin, "berth")}, append(args, o.Args...)...)
	if o.Netns != "" {
		args = append([]string{"nsenter", "--net=/run/netns/" + o.Netns, "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = o.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	d.Process = cmd.Process
	go func() { _ = cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + d.Listen + "/v1/health"); err == nil {
			resp.Body.Close()
			var cc struct{ APIKey string }
			if b, err := os.ReadFile(filepath.Join(o.Data, "client.json")); err == nil && json.Unmarshal(b, &cc) == nil {
				d.APIKey = cc.APIKey
				d.Client = client.New("http://"+d.Listen, cc.APIKey)
				return d, nil
			}
		}
		select {
		case <-d.exited:
			logf.Close()
			return nil, fmt.Errorf("berth serve exited at start; see %s", o.Log)
		case <-time.After(50 * time.Millisecond):
		}
	}
	d.Kill9()
	return nil, fmt.Errorf("berth serve did not become healthy in 60 s; see %s", o.Log)
}

// Exited is closed once the daemon process has ended.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// Stop ends the daemon with SIGTERM, and SIGKILL after 15 s.
func (d *Daemon) Stop() {
	_ = d.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		d.Kill9()
	}
	d.logf.Close()
}

// Kill9 ends the daemon at once, as a crash would, and waits for it.
func (d *Daemon) Kill9() {
	_ = d.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// handedOut holds every port FreePort returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// FreePort returns a loopback address with a port free right now, and
// never one it returned before in this process: a port handed to one
// daemon (say its --node-listen) is free again the moment that daemon
// stops, and the kernel may offer it for the next one's --listen while
// the test still means to reuse it (TestClusterStore's restarted node
// got its own node port as its API port, and could not serve the node
// API).
func FreePort() string {
	handedOut.Lock()
	defer handedOut.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		addr := l.Addr().String()
		l.Close()
		if !handedOut.ports[addr] {
			handedOut.ports[addr] = true
			return addr
		}
	}
}

// EnsureBase builds the default image debian-trixie through c unless it
// exists from this berth's recipe; progress goes to logf.
func EnsureBase(c *client.Client, logf func(format string, args ...any)) error {
	ctx := context.Background()
	imgs, err := c.ListImages(ctx)
	if err != nil {
		return err
	}
	for _, i := range imgs {
		if i.Name == "debian-trixie" && image.IsCurrentBase(i.Labels) {
			return nil
		}
	}
	logf("building the debian-trixie base image (missing, or from an older recipe)…")
	t0 := time.Now()
	_, err = c.BuildBase(ctx, func(p api.Progress) {
		if p.Message != "" {
			logf("  build-base: %s", p.Message)
		}
	})
	logf("build-base took %s", time.Since(t0).Round(time.Second))
	return err
}

// CheckTestBuild reports an error unless the berth binary in dir was built
// with the berthtest tag: only such a build honours BERTH_TEST_WEAKEN and
// BERTH_FAILPOINTS, and a suite whose negative controls ran against a
// release build would pass without testing anything.
func CheckTestBuild(dir string) error {
	path := filepath.Join(dir, "berth")
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read build info of %s: %w", path, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), "berthtest") {
			return nil
		}
	}
	return fmt.Errorf("%s was built without -tags berthtest, so its test switches and failpoints are absent; build it with BERTH_BUILD_TAGS=berthtest scripts/build.sh", path)
}

// SuiteDigit is BERTH_IT_ID when it is one digit 1-9, else "0": the digit
// a suite puts in its subnet and user-namespace ids so that suites given
// different ids never collide on one machine.
func SuiteDigit() string {
	if v := os.Getenv("BERTH_IT_ID"); len(v) == 1 && v[0] >= '1' && v[0] <= '9' {
		return v
	}
	return "0"
}

// EnvOr is the environment variable k, or def when it is unset or empty.
func EnvOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

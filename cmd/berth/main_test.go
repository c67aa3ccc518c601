package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/bench"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/daemon"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

func TestParseCpArgs(t *testing.T) {
	cases := []struct {
		src, dst     string
		from, to     cpEnd
		errSubstring string
	}{
		{src: "./a.txt", dst: "box:/tmp/a.txt", from: cpEnd{path: "./a.txt"}, to: cpEnd{"box", "/tmp/a.txt"}},
		{src: "box:/etc/os-release", dst: "-", from: cpEnd{"box", "/etc/os-release"}, to: cpEnd{path: "-"}},
		{src: "-", dst: "agent-47:data.csv", from: cpEnd{path: "-"}, to: cpEnd{"agent-47", "data.csv"}},
		{src: "a.txt", dst: "box:/x", from: cpEnd{path: "a.txt"}, to: cpEnd{"box", "/x"}},
		{src: "box:/a:b", dst: ".", from: cpEnd{"box", "/a:b"}, to: cpEnd{path: "."}},
		// Local paths with a colon: explicit ./ or / keeps them local.
		{src: "./notes:1", dst: "box:/n", from: cpEnd{path: "./notes:1"}, to: cpEnd{"box", "/n"}},
		{src: "/tmp/x:y", dst: "box:/n", from: cpEnd{path: "/tmp/x:y"}, to: cpEnd{"box", "/n"}},
		// Not a valid sandbox name before the colon: local.
		{src: "My:file", dst: "box:/n", from: cpEnd{path: "My:file"}, to: cpEnd{"box", "/n"}},
		{src: "box:/a", dst: "other:/b", errSubstring: "both SRC and DST"},
		{src: "a", dst: "b", errSubstring: "one of SRC and DST"},
		{src: "-", dst: "-", errSubstring: "one of SRC and DST"},
		{src: "box:", dst: ".", errSubstring: "names no path"},
		{src: "", dst: "box:/x", errSubstring: "empty path"},
	}
	for _, c := range cases {
		from, to, err := parseCpArgs(c.src, c.dst)
		if c.errSubstring != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSubstring) {
				t.Errorf("cp %q %q: err %v, want %q", c.src, c.dst, err, c.errSubstring)
			}
			continue
		}
		if err != nil || from != c.from || to != c.to {
			t.Errorf("cp %q %q = %+v %+v %v, want %+v %+v", c.src, c.dst, from, to, err, c.from, c.to)
		}
	}
}

func TestExitStatus(t *testing.T) {
	cases := []struct {
		st   api.ExitStatus
		want int
		err  bool
	}{
		{api.ExitStatus{ExitCode: 0}, 0, false},
		{api.ExitStatus{ExitCode: 3}, 3, false},
		{api.ExitStatus{ExitCode: 137, Signal: "SIGKILL"}, 137, false},
		{api.ExitStatus{ExitCode: 0, Signal: "SIGTERM"}, 143, false}, // server gave only the name
		{api.ExitStatus{ExitCode: 256}, 0, true},                     // would exit 0
		{api.ExitStatus{ExitCode: -1}, 0, true},
	}
	for _, c := range cases {
		got, err := exitStatus(c.st)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%+v: %d %v, want %d err=%v", c.st, got, err, c.want, c.err)
		}
	}
}

// fake is a control.Backend; unimplemented methods panic into a 500.
type fake struct {
	control.Backend
	mu      sync.Mutex
	created api.CreateSandboxRequest
	execReq api.ExecRequest
	files   map[string][]byte
	modes   map[string]uint32
	fileOpt agentclient.FileOptions // of the last WriteFile
	execFn  func(req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error)
}

func (f *fake) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error) {
	f.created = req
	return api.Sandbox{Name: req.Name, State: api.StateRunning}, true, nil
}

func (f *fake) Get(ctx context.Context, name string) (api.Sandbox, error) {
	return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
}

func (f *fake) Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	f.execReq = req
	if name == "gone" {
		return api.ExitStatus{}, errdefs.NotFound("sandbox %q not found", name)
	}
	return f.execFn(req, stdout, stderr)
}

func (f *fake) Stat(ctx context.Context, name, p string) (api.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == "/dir" {
		return api.FileInfo{Path: p, Type: "dir"}, nil
	}
	b, ok := f.files[p]
	if !ok {
		return api.FileInfo{}, errdefs.NotFound("%s: no such file", p)
	}
	return api.FileInfo{Path: p, Type: "file", Size: int64(len(b)), Mode: f.modes[p]}, nil
}

func (f *fake) ReadFile(ctx context.Context, name, p string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return io.NopCloser(bytes.NewReader(f.files[p])), nil
}

func (f *fake) WriteFile(ctx context.Context, name, p string, r io.Reader, mode uint32) error {
	b, err := io.ReadAll(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[p], f.modes[p] = b, mode
	f.fileOpt = agentclient.FileOptionsFrom(ctx)
	return err
}

type cli struct {
	t   *testing.T
	url string
	f   *fake
}

func newCLI(t *testing.T) *cli {
	f := &fake{files: map[string][]byte{}, modes: map[string]uint32{}}
	ts := httptest.NewServer(server.New(f, server.Options{APIKey: "k"}))
	t.Cleanup(ts.Close)
	return &cli{t: t, url: ts.URL, f: f}
}

// run runs berth with args against the fake server and returns its exit
// status, stdout and stderr.
func (c *cli) run(stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	all := append([]string{"--url", c.url, "--api-key", "k"}, args...)
	code := run(context.Background(), all, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestExecExitCodes(t *testing.T) {
	c := newCLI(t)
	c.f.execFn = func(req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		io.WriteString(stdout, "out\n")
		io.WriteString(stderr, "err\n")
		switch {
		case req.Command != "":
			return api.ExitStatus{ExitCode: 0}, nil
		case req.Argv[0] == "fail":
			return api.ExitStatus{ExitCode: 3}, nil
		case req.Argv[0] == "killed":
			return api.ExitStatus{ExitCode: 137, Signal: "SIGKILL"}, nil
		case req.Argv[0] == "lost":
			return api.ExitStatus{}, errdefs.Unavailable("agent connection lost")
		}
		return api.ExitStatus{}, nil
	}
	cases := []struct {
		args     []string
		want     int
		stderrIs string
	}{
		{[]string{"exec", "box", "--", "true"}, 0, ""},
		{[]string{"exec", "box", "--", "fail", "-x"}, 3, ""},
		{[]string{"exec", "box", "--", "killed"}, 137, ""},
		{[]string{"exec", "box", "-c", "echo hi | wc"}, 0, ""},
		{[]string{"exec", "box", "--", "lost"}, exitBerthError, "agent connection lost"},
		{[]string{"exec", "gone", "--", "true"}, exitBerthError, `"gone" not found`},
		{[]string{"exec", "box"}, exitBerthError, "no command given"},
		{[]string{"exec", "box", "extra", "--", "ls"}, exitBerthError, "only the sandbox name"},
		{[]string{"exec", "box", "--bogus", "--", "ls"}, exitBerthError, "unknown flag"},
	}
	for _, tc := range cases {
		code, out, errs := c.run("", tc.args...)
		if code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, code, tc.want, errs)
		}
		if tc.stderrIs != "" && !strings.Contains(errs, tc.stderrIs) {
			t.Errorf("%q: stderr %q lacks %q", tc.args, errs, tc.stderrIs)
		}
		if tc.want != exitBerthError && (out != "out\n" || !strings.Contains(errs, "err\n")) {
			t.Errorf("%q: stdout %q stderr %q", tc.args, out, errs)
		}
	}
	// Flags reach the request; -i sends stdin.
	code, _, errs := c.run("input", "exec", "box", "-i", "--cwd", "/srv", "--env", "A=1", "--user", "u", "--timeout", "2s", "--", "cat", "-n")
	r := c.f.execReq
	if code != 0 || string(r.Stdin) != "input" || r.Cwd != "/srv" || r.Env["A"] != "1" || r.User != "u" || r.TimeoutMs != 2000 || strings.Join(r.Argv, " ") != "cat -n" {
		t.Fatalf("exit %d %q, request %+v", code, errs, r)
	}
}

func TestSandboxCreateFlags(t *testing.T) {
	c := newCLI(t)
	code, out, errs := c.run("", "sb", "create", "demo", "--image", "node", "--vcpu", "0.5", "--internet", "--env", "A=B=C", "--label", "team=x", "--sleep-after", "5m", "--get")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	r := c.f.created
	if r.Name != "demo" || r.Image != "node" || r.Resources == nil || r.Resources.VCPU != 0.5 || r.Internet == nil || !*r.Internet ||
		r.Env["A"] != "B=C" || r.Labels["team"] != "x" || r.SleepAfter != "5m" || r.KeepAlive != nil {
		t.Fatalf("request %+v", r)
	}
	var sb api.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.Name != "demo" {
		t.Fatalf("output %q", out)
	}
	if code, _, errs := c.run("", "sandbox", "create", "demo", "--env", "novalue"); code != 1 || !strings.Contains(errs, "KEY=VALUE") {
		t.Fatalf("bad --env: %d %q", code, errs)
	}
	if code, _, errs := c.run("", "sandbox", "get", "nope"); code != 1 || !strings.Contains(errs, `"nope" not found`) {
		t.Fatalf("get missing: %d %q", code, errs)
	}
}

func TestCpRoundTrip(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "run.sh")
	os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o755)
	if code, _, errs := c.run("", "cp", src, "box:/dir"); code != 0 {
		t.Fatalf("upload: %d %s", code, errs)
	}
	if string(c.f.files["/dir/run.sh"]) != "#!/bin/sh\necho hi\n" || c.f.modes["/dir/run.sh"] != 0o755 {
		t.Fatalf("uploaded %q mode %o", c.f.files["/dir/run.sh"], c.f.modes["/dir/run.sh"])
	}
	if code, _, errs := c.run("from stdin", "cp", "-", "box:/in.txt"); code != 0 || string(c.f.files["/in.txt"]) != "from stdin" {
		t.Fatalf("stdin upload: %d %s", code, errs)
	}
	// From stdin no mode is sent: an existing file keeps its own.
	if c.f.modes["/in.txt"] != 0 {
		t.Fatalf("stdin upload sent mode %o", c.f.modes["/in.txt"])
	}
	if code, _, errs := c.run("x", "cp", "--user", "root", "--session", "s1", "-", "box:rel.txt"); code != 0 || c.f.fileOpt.User != "root" || c.f.fileOpt.Session != "s1" {
		t.Fatalf("cp --user --session: %d %s %+v", code, errs, c.f.fileOpt)
	}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	if code, _, errs := c.run("", "cp", "box:/dir/run.sh", out); code != 0 {
		t.Fatalf("download: %d %s", code, errs)
	}
	fi, err := os.Stat(filepath.Join(out, "run.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("downloaded file %v %v", fi, err)
	}
	if code, stdout, _ := c.run("", "cp", "box:/in.txt", "-"); code != 0 || stdout != "from stdin" {
		t.Fatalf("download to stdout: %d %q", code, stdout)
	}
	if code, _, errs := c.run("", "cp", "box:/missing", out); code != 1 || !strings.Contains(errs, "no such file") {
		t.Fatalf("missing: %d %q", code, errs)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Fatalf("a failed download left files: %v", entries)
	}
}

func TestServeAndBenchWiring(t *testing.T) {
	var got daemon.Config
	runDaemon = func(ctx context.Context, cfg daemon.Config) error { got = cfg; return errors.New("stop") }
	var gotOpts bench.Options
	runBench = func(ctx context.Context, c *client.Client, o bench.Options, out io.Writer) error {
		gotOpts = o
		return nil
	}
	var gotTask bench.Options
	runTaskBench = func(ctx context.Context, c *client.Client, o bench.Options, out io.Writer) error {
		gotTask = o
		return nil
	}
	var gotIdle bench.Options
	runIdleBench = func(ctx context.Context, c *client.Client, o bench.Options, out io.Writer) error {
		gotIdle = o
		return nil
	}
	t.Cleanup(func() {
		runDaemon, runBench, runTaskBench, runIdleBench = daemon.Run, bench.Run, bench.RunTask, bench.RunIdle
	})

	code, _, errs := (&cli{t: t}).runRaw("serve", "--listen", "127.0.0.1:9", "--data", "/srv/b", "--runtime", "/bin/runc", "--subnet", "10.99.0.0/16",
		"--cluster", "postgres://berth@db:5432/berth",
		"--node-listen", "10.0.0.5:7443", "--cluster-token-file", "/etc/berth/token", "--node-tls-cert", "/c.pem", "--node-tls-key", "/k.pem", "--node-ca", "/ca.pem", "--node-insecure")
	if code != 1 || !strings.Contains(errs, "stop") {
		t.Fatalf("serve: %d %q", code, errs)
	}
	if got.Listen != "127.0.0.1:9" || got.DataDir != "/srv/b" || got.Runtime != "/bin/runc" || got.Subnet != "10.99.0.0/16" ||
		got.Cluster != "postgres://berth@db:5432/berth" {
		t.Fatalf("config %+v", got)
	}
	if want := (daemon.NodeAPIConfig{Listen: "10.0.0.5:7443", TokenFile: "/etc/berth/token", TLSCert: "/c.pem", TLSKey: "/k.pem", CA: "/ca.pem", Insecure: true}); got.Node != want {
		t.Fatalf("node API config %+v, want %+v", got.Node, want)
	}
	c := newCLI(t)
	if code, _, errs := c.run("", "bench", "--n", "7", "--json", "--data", "/d"); code != 0 || gotOpts.N != 7 || !gotOpts.JSON || gotOpts.DataDir != "/d" {
		t.Fatalf("bench: %d %q %+v", code, errs, gotOpts)
	}
	// --task runs the task benchmark, 5 samples unless --n says otherwise.
	gotOpts = bench.Options{}
	if code, _, errs := c.run("", "bench", "--task", "--pool", "standard-3", "--node-packages", "40", "--data", "/d"); code != 0 || !gotTask.Task || gotTask.N != 5 ||
		gotTask.PoolInstance != "standard-3" || gotTask.Workspace.NodePackages != 40 || gotOpts.N != 0 {
		t.Fatalf("bench --task: %d %q %+v (bench.Run got %+v)", code, errs, gotTask, gotOpts)
	}
	if code, _, _ := c.run("", "bench", "--task", "--n", "2", "--data", "/d"); code != 0 || gotTask.N != 2 {
		t.Fatalf("bench --task --n 2: %d %+v", code, gotTask)
	}
	if code, _, errs := c.run("", "bench", "--task", "--burst", "10", "--data", "/d"); code == 0 || !strings.Contains(errs, "--task") {
		t.Fatalf("bench --task --burst must be refused: %d %q", code, errs)
	}
	// --idle runs the idle scenario alone, with its own knobs.
	gotOpts = bench.Options{}
	if code, _, errs := c.run("", "bench", "--idle", "1000", "--idle-parallel", "6", "--idle-window", "10s", "--idle-sample", "30",
		"--idle-min-available", "4096", "--daemon-pid", "42", "--data", "/d"); code != 0 || gotIdle.Idle != 1000 || gotIdle.IdleParallel != 6 ||
		gotIdle.IdleWindow != 10*time.Second || gotIdle.IdleSample != 30 || gotIdle.IdleMinAvailMiB != 4096 || gotIdle.DaemonPid != 42 || gotOpts.N != 0 {
		t.Fatalf("bench --idle: %d %q %+v (bench.Run got %+v)", code, errs, gotIdle, gotOpts)
	}
	if code, _, errs := c.run("", "bench", "--idle", "10", "--burst", "10", "--data", "/d"); code == 0 || !strings.Contains(errs, "--idle") {
		t.Fatalf("bench --idle --burst must be refused: %d %q", code, errs)
	}
}

func (c *cli) runRaw(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestNoServerConfiguredMessage(t *testing.T) {
	t.Setenv(client.EnvURL, "")
	t.Setenv(client.EnvAPIKey, "")
	code, _, errs := (&cli{t: t}).runRaw("sandbox", "ls", "--data", t.TempDir())
	if code != 1 || !strings.Contains(errs, "berth serve") {
		t.Fatalf("%d %q", code, errs)
	}
}

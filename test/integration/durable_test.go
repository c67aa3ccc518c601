//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestIdempotentCreateAcrossRestart is issue 9's test 5 against the real
// daemon: a create retried with the same Idempotency-Key after a kill -9
// and restart returns the first answer and starts nothing new.
func TestIdempotentCreateAcrossRestart(t *testing.T) {
	start := time.Now().Add(-time.Second) // the journal outlives earlier runs
	ctx := client.WithIdempotencyKey(context.Background(), fmt.Sprintf("it-idem-%d", time.Now().UnixNano()))
	first, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-idem", Env: map[string]string{"SECRET_TOKEN": "hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.c.Destroy(context.Background(), "it-idem") })
	// Destroy it, then crash the daemon: a replay must not bring it back.
	if err := d.c.Destroy(context.Background(), "it-idem"); err != nil {
		t.Fatal(err)
	}
	d.kill9()
	if d, err = startDaemon(nil); err != nil {
		t.Fatal(err)
	}
	again, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-idem", Env: map[string]string{"SECRET_TOKEN": "hunter2"}})
	if err != nil || again.ID != first.ID {
		t.Fatalf("retry after restart: %+v %v; want the first answer (id %s)", again, err, first.ID)
	}
	if _, err := d.c.Get(context.Background(), "it-idem"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the replayed create ran again: %v", err)
	}
	j, err := d.c.Journal(context.Background(), "it-idem")
	if err != nil {
		t.Fatal(err)
	}
	creates := 0
	for _, e := range j {
		if e.Op == "get-or-create" && e.Key != "" && e.At.After(start) {
			creates++
			if strings.Contains(string(e.Args), "hunter2") {
				t.Fatalf("secret in the journal: %s", e.Args)
			}
		}
	}
	if creates != 1 {
		t.Fatalf("journal has %d keyed creates, want 1: %+v", creates, j)
	}
}

// startProgram runs another berth-embedding binary in the suite daemon's
// place (same data dir, bridge and subnet).
func startProgram(t *testing.T, bin string, pre []string, extra ...string) *daemonProc {
	t.Helper()
	p := launchProgram(t, bin, pre, nil, extra...)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + p.listen + "/v1/health"); err == nil {
			resp.Body.Close()
			var cc struct{ URL, APIKey string }
			if b, err := os.ReadFile(filepath.Join(dataDir, "client.json")); err == nil && json.Unmarshal(b, &cc) == nil {
				p.c = client.New("http://"+p.listen, cc.APIKey)
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.kill9()
	t.Fatalf("%s did not become healthy; see %s", bin, p.log.Name())
	return nil
}

// launchProgram starts bin with env and does not wait for it.
func launchProgram(t *testing.T, bin string, pre, env []string, extra ...string) *daemonProc {
	t.Helper()
	listen, previewListen := freePort(), freePort()
	logf, err := os.OpenFile(filepath.Join(os.TempDir(), "berth-it"+itID+"-example.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := append(append(pre, "--listen"), listen, "--data", dataDir, "--run-dir", itRunDir, "--preview-listen", previewListen,
		"--bridge", itBridge, "--subnet", itSubnet, "--alarm-tick", "200ms",
		"--runtime", filepath.Join(binDir, "runc"))
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &daemonProc{cmd: cmd, listen: listen, previewListen: previewListen, log: logf}
}

// TestAgentWorkspaceExample is issue 9's test 6: it builds
// examples/agent-workspace, runs it in place of berth serve and drives the
// AgentSandbox class over HTTP RPC: start, write a file, save, destroy the
// container, restore, find the file.
func TestAgentWorkspaceExample(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agent-workspace")
	build := exec.Command("go", "build", "-tags", "berthtest", "-o", bin, "./examples/agent-workspace")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build example: %v\n%s", err, out)
	}
	d.stop()
	ex := startProgram(t, bin, nil, "--agent", filepath.Join(binDir, "berth-agent"))
	t.Cleanup(func() {
		ex.stop()
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Fatalf("restart the suite daemon: %v", err)
		}
	})
	ctx := context.Background()
	c := ex.c
	id := fmt.Sprintf("it-ws-%d", time.Now().UnixNano()%1e6)
	sandboxName := durable.SandboxName(durable.Address{Class: "AgentSandbox", ID: id})
	call := func(method string, args, out any) error {
		return c.CallObject(ctx, "AgentSandbox", id, method, args, out)
	}
	t.Cleanup(func() {
		_ = c.Destroy(context.Background(), sandboxName)
		if snaps, err := c.ListSnapshots(context.Background(), sandboxName, ""); err == nil {
			for _, s := range snaps {
				_ = c.DeleteSnapshot(context.Background(), s.ID)
			}
		}
	})

	// No snapshot yet: restore fails with the example's error.
	err := call("RestoreWorkspace", nil, nil)
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no workspace snapshot found") {
		t.Fatalf("restore before save: %v", err)
	}
	var started struct {
		AlreadyRunning       bool
		Image, Instance, Why string
	}
	t0 := time.Now()
	if err := call("StartWorkspace", map[string]string{"toolchain": "python", "workload": "build"}, &started); err != nil {
		t.Fatal(err)
	}
	t.Logf("StartWorkspace: %+v in %v", started, time.Since(t0))
	if started.AlreadyRunning || started.Instance != "standard-2" || started.Image != "debian-trixie" {
		t.Fatalf("start: %+v", started)
	}
	sb, err := c.Get(ctx, sandboxName)
	if err != nil || sb.State != api.StateRunning || sb.Instance != "standard-2" || !sb.Internet {
		t.Fatalf("container: %+v %v", sb, err)
	}
	if err := call("StartWorkspace", map[string]string{"toolchain": "python", "workload": "build"}, &started); err != nil || !started.AlreadyRunning {
		t.Fatalf("second start: %+v %v", started, err)
	}
	var res struct {
		ExitCode       int
		Stdout, Stderr string
	}
	if err := call("Run", map[string]any{"argv": []string{"sh", "-c", "mkdir -p /home/user/project && echo ready > /home/user/project/state.txt && python3 -c 'print(6*7)'"}}, &res); err != nil || res.ExitCode != 0 || res.Stdout != "42\n" {
		t.Fatalf("write a file: %+v %v", res, err)
	}
	// On a pty: the command sees a terminal.
	if err := call("Run", map[string]any{"argv": []string{"sh", "-c", "tty; exit 3"}, "pty": true}, &res); err != nil || res.ExitCode != 3 || !strings.HasPrefix(res.Stdout, "/dev/pts/") {
		t.Fatalf("pty exec: %+v %v", res, err)
	}
	var h durable.SnapshotHandle
	if err := call("SaveWorkspace", nil, &h); err != nil || h.ID == "" || h.Name != "project-ready" {
		t.Fatalf("save: %+v %v", h, err)
	}
	if err := call("DestroyWorkspace", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, sandboxName); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("container after destroy: %v", err)
	}
	var restored durable.SnapshotHandle
	if err := call("RestoreWorkspace", nil, &restored); err != nil || restored.ID != h.ID {
		t.Fatalf("restore: %+v %v", restored, err)
	}
	if sb, err := c.Get(ctx, sandboxName); err != nil || sb.Instance != "standard-2" || sb.Snapshot != h.ID {
		t.Fatalf("restored container: %+v %v", sb, err)
	}
	if err := call("Run", map[string]any{"argv": []string{"cat", "/home/user/project/state.txt"}}, &res); err != nil || res.Stdout != "ready\n" {
		t.Fatalf("file after restore: %+v %v", res, err)
	}
	// The journal has the container's lifecycle and the RPCs.
	j, err := c.Journal(ctx, sandboxName)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, e := range j {
		ops[e.Op]++
	}
	if ops["container.start"] < 2 || ops["container.snapshot"] != 1 || ops["container.destroy"] != 1 || ops["rpc"] < 5 {
		t.Fatalf("journal ops: %v", ops)
	}
}

// TestPolicyOnDaemon runs berth serve with a policy file and a tenant key:
// the operator's key may start what the default section allows, the
// tenant is held to its instance types, internet and sandbox quota, and an
// image off the allowlist is refused for everyone. Refused starts leave no
// sandbox behind.
func TestPolicyOnDaemon(t *testing.T) {
	ctx := context.Background()
	imgs, err := d.c.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, i := range imgs {
		if i.Name == "debian-trixie" {
			digest = i.Digest
		}
	}
	const tenantKey = "it-tenant-key-0123456789"
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "images:\n  debian-trixie: " + digest + "\n" +
		"default:\n  instanceTypes: [lite, standard-1]\n  internet: false\n" +
		"tenants:\n  - name: it-team\n    apiKeys: [\"" + tenantKey + "\"]\n    instanceTypes: [lite]\n    maxSandboxes: 1\n    internet: false\n"
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(binDir, "berth"), "policy", "check", pol).CombinedOutput(); err != nil {
		t.Fatalf("policy check: %v\n%s", err, out)
	}
	d.stop()
	p := startProgram(t, filepath.Join(binDir, "berth"), []string{"serve"}, "--policy", pol)
	t.Cleanup(func() {
		for _, n := range []string{"it-pol-op", "it-pol-t1", "it-pol-t2", "it-pol-x"} {
			_ = p.c.Destroy(context.Background(), n)
		}
		p.stop()
		if d, err = startDaemon(nil); err != nil {
			t.Fatalf("restart the suite daemon: %v", err)
		}
	})
	tc := client.New(p.c.BaseURL(), tenantKey)
	yes := true
	refused := func(c *client.Client, req api.CreateSandboxRequest, kind error) {
		t.Helper()
		if _, _, err := c.GetOrCreate(ctx, req); !errors.Is(err, kind) {
			t.Fatalf("%+v: want %v, got %v", req, kind, err)
		}
		if _, err := p.c.Get(ctx, req.Name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("refused %s left a sandbox: %v", req.Name, err)
		}
	}
	if _, _, err := p.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-pol-op", Instance: "standard-1"}); err != nil {
		t.Fatalf("operator within the default section: %v", err)
	}
	refused(p.c, api.CreateSandboxRequest{Name: "it-pol-x", Instance: "standard-2"}, errdefs.ErrPermissionDenied)
	refused(p.c, api.CreateSandboxRequest{Name: "it-pol-x", Internet: &yes}, errdefs.ErrPermissionDenied)
	refused(tc, api.CreateSandboxRequest{Name: "it-pol-x", Instance: "standard-1"}, errdefs.ErrPermissionDenied)
	if _, _, err := tc.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-pol-t1", Instance: "lite"}); err != nil {
		t.Fatalf("tenant within its policy: %v", err)
	}
	refused(tc, api.CreateSandboxRequest{Name: "it-pol-t2", Instance: "lite"}, errdefs.ErrResourceExhausted)
	if l, err := tc.List(ctx, "", nil); err != nil || len(l) != 1 || l[0].Name != "it-pol-t1" {
		t.Fatalf("tenant's list: %+v %v", l, err)
	}
	if _, err := tc.Exec(ctx, "it-pol-op", api.ExecRequest{Command: "true"}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("tenant exec in the operator's sandbox: %v", err)
	}
	// The operator's snapshot is invisible to the tenant, also by id.
	sn, err := p.c.Snapshot(ctx, "it-pol-op", api.SnapshotRequest{Name: "it-pol"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.c.DeleteSnapshot(context.Background(), sn.ID) })
	if _, err := tc.GetSnapshot(ctx, sn.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("tenant reads the operator's snapshot: %v", err)
	}
	if l, err := tc.ListSnapshots(ctx, "", ""); err != nil || len(l) != 0 {
		t.Fatalf("tenant lists snapshots: %+v %v", l, err)
	}
	if err := p.c.Destroy(ctx, "it-pol-t1"); err != nil {
		t.Fatal(err)
	}
	refused(tc, api.CreateSandboxRequest{Name: "it-pol-t2", Instance: "lite", Snapshot: sn.ID}, errdefs.ErrNotFound)
	if _, err := p.c.GetSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("operator reads its snapshot: %v", err)
	}

	// The tenant's key works as E2B_API_KEY, under the tenant's policy: it
	// lists only its own sandboxes (none) and cannot create one of the
	// default size (standard-1; it may use lite only). An unknown key is 401.
	e2b := func(key, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, p.c.BaseURL()+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, strings.TrimSpace(string(b))
	}
	if st, body := e2b(tenantKey, http.MethodGet, "/v2/sandboxes", ""); st != http.StatusOK || body != "[]" {
		t.Fatalf("E2B list with the tenant key: %d %s", st, body)
	}
	if st, body := e2b("it-unknown-key-0123456789", http.MethodGet, "/v2/sandboxes", ""); st != http.StatusUnauthorized {
		t.Fatalf("E2B list with an unknown key: %d %s", st, body)
	}
	if st, body := e2b(tenantKey, http.MethodPost, "/v2/sandboxes", `{"templateID":"base","timeout":60}`); st != http.StatusForbidden || !strings.Contains(body, "standard-1") {
		t.Fatalf("E2B create of a standard-1 sandbox with the tenant key: %d %s, want 403 naming the instance", st, body)
	}
	if l, err := tc.List(ctx, "", nil); err != nil || len(l) != 0 {
		t.Fatalf("tenant's sandboxes after the refused E2B create: %+v %v", l, err)
	}
}

// TestContainerAPI drives every ctx.Container call over RPC through a
// probe class (testdata/probe) against the real runtime: entrypoint,
// start-while-running, image XOR snapshot, inactivity timeout observed by
// Monitor, Signal, Images and Destroy.
func TestContainerAPI(t *testing.T) {
	pr, bin := startProbeProgram(t)
	t.Cleanup(func() { pr.stop() }) // the program running at the end
	ctx := context.Background()
	c := pr.c
	id := fmt.Sprintf("it-probe-%d", time.Now().UnixNano()%1e6)
	call := func(method string, args, out any) error { return c.CallObject(ctx, "Probe", id, method, args, out) }
	var name string
	if err := call("Name", nil, &name); err != nil {
		t.Fatal(err)
	}
	// A figure, not a target: RPC round trip to an idle object on the
	// real daemon (journaled like every call).
	lat := make([]time.Duration, 0, 200)
	for i := 0; i < 200; i++ {
		t0 := time.Now()
		if err := call("Name", nil, &name); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("object RPC round trip (idle object, real daemon): p50 %v, p99 %v", lat[len(lat)/2], lat[len(lat)*99/100])
	t.Cleanup(func() { _ = c.Destroy(context.Background(), name) })
	start := map[string]any{"image": "debian-trixie", "instance": "lite",
		"entrypoint": []string{"sh", "-c", "echo started > /tmp/entrypoint; exec sleep 1000"}}
	if err := call("Start", start, nil); err != nil {
		t.Fatal(err)
	}
	var running bool
	if err := call("Running", nil, &running); err != nil || !running {
		t.Fatalf("running after start: %v %v", running, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.Exec(ctx, name, api.ExecRequest{Command: "cat /tmp/entrypoint"})
		if err == nil && res.Stdout == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entrypoint did not run: %+v %v", res, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := call("Start", start, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("start while running: %v", err)
	}
	if err := call("Start", map[string]any{"image": "debian-trixie", "snapshot": map[string]string{"id": "snap_x"}}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("image and snapshot: %v", err)
	}
	var imgs map[string]string
	if err := call("Images", nil, &imgs); err != nil || !strings.HasPrefix(imgs["debian-trixie"], "sha256:") {
		t.Fatalf("images: %v %v", imgs, err)
	}
	// Idle for 1s: the inactivity timeout sleeps it; Monitor sees that.
	if err := call("SetTimeout", map[string]int{"Seconds": 1}, nil); err != nil {
		t.Fatal(err)
	}
	var info durable.ExitInfo
	t0 := time.Now()
	if err := call("Monitor", nil, &info); err != nil || info.Reason != "sleeping" {
		t.Fatalf("monitor (inactivity): %+v %v", info, err)
	}
	t.Logf("inactivity timeout 1s: stopped after %v", time.Since(t0).Round(10*time.Millisecond))
	// Start wakes it; SIGTERM stops it again.
	if err := call("Start", map[string]any{"image": "debian-trixie"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("SetTimeout", map[string]int{"Seconds": 600}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("Signal", map[string]int{"Signal": 15}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("Monitor", nil, &info); err != nil || info.Reason != "sleeping" {
		t.Fatalf("monitor (signal): %+v %v", info, err)
	}
	if err := call("Signal", map[string]int{"Signal": 1}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("SIGHUP: %v", err)
	}
	// With an entrypoint, signals go to it, its end stops the container,
	// and Monitor reports its exit code (128+n for a signal).
	// The signal is sent once the entrypoint has reached its program (a
	// signal to a process still starting up is a different question).
	if err := call("Start", map[string]any{"image": "debian-trixie",
		"entrypoint": []string{"sh", "-c", "echo up > /tmp/entrypoint-hup; exec sleep 1000"}}, nil); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		res, err := c.Exec(ctx, name, api.ExecRequest{Command: "cat /tmp/entrypoint-hup"})
		if err == nil && res.Stdout == "up\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entrypoint did not run: %+v %v", res, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	escalated := watchAgentLog(ctx, c, name, "did not end")
	t0 = time.Now()
	err := call("Signal", map[string]int{"Signal": 1}, nil)
	why := escalated()
	if err != nil {
		t.Fatalf("SIGHUP to the entrypoint: %v%s", err, why)
	}
	if err := call("Monitor", nil, &info); err != nil || info.ExitCode != 129 || info.Reason != "sleeping" {
		t.Fatalf("monitor (entrypoint hung up): %+v %v (%s after the signal)%s", info, err, time.Since(t0).Round(time.Millisecond), why)
	}
	if err := call("Start", map[string]any{"image": "debian-trixie", "entrypoint": []string{"sh", "-c", "exit 7"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("Monitor", nil, &info); err != nil || info.ExitCode != 7 {
		t.Fatalf("monitor (entrypoint exit 7): %+v %v", info, err)
	}
	// The exit code is in the record: a restarted daemon still reports it.
	pr.stop()
	pr = startProgram(t, bin, nil, "--agent", filepath.Join(binDir, "berth-agent"))
	c = pr.c
	if err := call("Monitor", nil, &info); err != nil || info.ExitCode != 7 {
		t.Fatalf("monitor after a restart (entrypoint exit 7): %+v %v", info, err)
	}
	if err := call("Destroy", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("Monitor", nil, &info); err != nil || info.Reason != "destroyed" {
		t.Fatalf("monitor (destroyed): %+v %v", info, err)
	}
}

// watchAgentLog collects, until the returned stop is called, the lines of
// sandbox name's host-side agent.log that contain substr (the agent logs
// why a kill had to escalate to SIGKILL), for a failure message. The file
// goes with the sandbox's run directory when it sleeps, so it is read
// while the sandbox still runs.
func watchAgentLog(ctx context.Context, c *client.Client, name, substr string) (stop func() string) {
	sb, err := c.Get(ctx, name)
	if err != nil {
		return func() string { return fmt.Sprintf("\n(agent.log: %v)", err) }
	}
	path := filepath.Join(itRunDir, "sandboxes", sb.ID, "bundle", "agent.log")
	done, res := make(chan struct{}), make(chan string, 1)
	go func() {
		seen := map[string]bool{}
		var out strings.Builder
		grab := func() {
			data, _ := os.ReadFile(path)
			for _, l := range strings.Split(string(data), "\n") {
				if strings.Contains(l, substr) && !seen[l] {
					seen[l] = true
					out.WriteString("\nagent.log: " + l)
				}
			}
		}
		for {
			grab()
			select {
			case <-done:
				grab()
				res <- out.String()
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() string { close(done); return <-res }
}

// startProbeProgram replaces the suite daemon, for the rest of t, with a
// daemon program serving the probe class (testdata/probe) on the real
// runtime. The caller stops the program (it may restart it meanwhile);
// the suite daemon is started again after that. bin is the probe program,
// to start it again.
func startProbeProgram(t *testing.T) (pr *daemonProc, bin string) {
	t.Helper()
	bin = buildProbe(t)
	d.stop()
	t.Cleanup(func() {
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Fatalf("restart the suite daemon: %v", err)
		}
	})
	return startProgram(t, bin, nil, "--agent", filepath.Join(binDir, "berth-agent")), bin
}

func buildProbe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "probe")
	build := exec.Command("go", "build", "-tags", "berthtest", "-o", bin, "./test/integration/testdata/probe")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	return bin
}

// waitKilled waits for p to end and reports whether SIGKILL ended it.
func waitKilled(t *testing.T, p *daemonProc) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.kill9()
		t.Fatal("the daemon did not die at its failpoint")
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestDaemonKilledMidTransactionAndAlarm is issue 9's tests 1 and 2 with
// the whole daemon: it is SIGKILLed by a failpoint inside a storage
// transaction (after the first of 20 writes), and a restart finds none of
// them; then an alarm falls due while no daemon runs, the next daemon
// delivers it and is SIGKILLed after the handler's effect, and the daemon
// after that redelivers it: two deliveries, one effect (the handler goes
// through the journal).
func TestDaemonKilledMidTransactionAndAlarm(t *testing.T) {
	bin := buildProbe(t)
	agent := filepath.Join(binDir, "berth-agent")
	d.stop()
	var cur *daemonProc
	t.Cleanup(func() {
		if cur != nil {
			cur.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Fatalf("restart the suite daemon: %v", err)
		}
	})
	ctx := context.Background()
	id := fmt.Sprintf("it-kill-%d", time.Now().UnixNano()%1e6)
	call := func(method string, args, out any) error { return cur.c.CallObject(ctx, "Probe", id, method, args, out) }

	// 1. kill -9 inside a transaction.
	cur = launchProgram(t, bin, nil, []string{"BERTH_FAILPOINTS=store.object-commit=kill9"}, "--agent", agent)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get("http://" + cur.listen + "/v1/health"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("failpoint daemon not healthy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var cc struct{ APIKey string }
	b, _ := os.ReadFile(filepath.Join(dataDir, "client.json"))
	_ = json.Unmarshal(b, &cc)
	cur.c = client.New("http://"+cur.listen, cc.APIKey)
	if err := call("Fill", map[string]int{"N": 20}, nil); err == nil {
		t.Fatal("Fill succeeded with the failpoint set")
	}
	if !waitKilled(t, cur) {
		t.Fatal("the daemon did not die by SIGKILL at store.object-commit")
	}
	cur.log.Close()
	cur = startProgram(t, bin, nil, "--agent", agent)
	var n int
	if err := call("Count", nil, &n); err != nil || n != 0 {
		t.Fatalf("after kill -9 mid-transaction: %d keys (%v), want none", n, err)
	}
	if err := call("Fill", map[string]int{"N": 20}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call("Count", nil, &n); err != nil || n != 20 {
		t.Fatalf("control: %d keys (%v), want 20", n, err)
	}

	// 2. An alarm due during downtime, a crash after its effect.
	if err := call("Arm", map[string]int{"Ms": 300}, nil); err != nil {
		t.Fatal(err)
	}
	cur.stop()
	cur = nil
	time.Sleep(time.Second) // the alarm falls due while no daemon runs
	k := launchProgram(t, bin, nil, []string{"BERTH_FAILPOINTS=durable.alarm-handled=kill9"}, "--agent", agent)
	if !waitKilled(t, k) {
		t.Fatal("the daemon did not die by SIGKILL after the alarm handler")
	}
	k.log.Close()
	cur = startProgram(t, bin, nil, "--agent", agent)
	var eff map[string]int
	for deadline := time.Now().Add(20 * time.Second); ; {
		if err := call("Effects", nil, &eff); err != nil {
			t.Fatal(err)
		}
		if eff["deliveries"] >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if eff["deliveries"] != 2 || eff["effects"] != 1 {
		t.Fatalf("alarm: %v, want 2 deliveries and exactly 1 effect", eff)
	}
}

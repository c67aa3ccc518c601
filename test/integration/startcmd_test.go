//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// buildStartImage builds an image whose ENTRYPOINT and CMD serve
// /srv/web over HTTP on 8080, as the user web.
func buildStartImage(t *testing.T, name, dockerfile string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, log, _, err := buildDir(t, d.c, dir, api.BuildRequest{Name: name}); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, strings.Join(log, "\n"))
	}
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), name) })
}

const fetchIndex = `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8080/index.html", timeout=5).read().decode().strip())'`

// `start: image` runs the image's own ENTRYPOINT and CMD as its USER in its
// WORKDIR, and the create answers once the port is ready; a wake from
// files runs it again, and the get-or-create that wakes waits again.
func TestStartImageCommand(t *testing.T) {
	buildStartImage(t, "it-start:web", `FROM debian-trixie
RUN useradd --uid 1600 web && mkdir -p /srv/web && echo hello-start > /srv/web/index.html && chown -R web /srv/web
USER web
WORKDIR /srv/web
ENTRYPOINT ["python3", "-m", "http.server"]
CMD ["8080"]
`)
	ctx := context.Background()
	req := api.CreateSandboxRequest{Name: "it-start-web", Image: "it-start:web", Sleep: api.SleepStop,
		Start: &api.StartCommand{Image: true, Ready: &api.Readiness{Port: &api.WaitPortRequest{Port: 8080, TimeoutMs: 30000}}}}
	sb := sandbox(t, req)
	if sb.Start == nil || !sb.Start.Image {
		t.Fatalf("the sandbox does not show its start command: %+v", sb.Start)
	}
	// No retry: the create answered only once the server was ready.
	if out := run(t, req.Name, fetchIndex); out.ExitCode != 0 || strings.TrimSpace(out.Stdout) != "hello-start" {
		t.Fatalf("right after create: %+v", out)
	}
	p, err := d.c.GetProcess(ctx, req.Name, api.StartProcessID)
	if err != nil {
		t.Fatal(err)
	}
	if p.User != "web" || p.Cwd != "/srv/web" || p.Status != api.ProcessRunning ||
		p.Command != "exec 'python3' '-m' 'http.server' '8080'" {
		t.Fatalf("start process: %+v", p)
	}
	// The process is python itself (exec), running as uid 1600.
	pid := strconv.Itoa(p.PID)
	if out := run(t, req.Name, "cat /proc/"+pid+"/comm; stat -c %u /proc/"+pid); strings.Join(strings.Fields(out.Stdout), " ") != "python3 1600" {
		t.Fatalf("start process %d: %q", p.PID, out.Stdout)
	}

	// Sleep in the stop tier: the process is gone. The get-or-create that
	// wakes it runs the command again and waits for the port again.
	if err := d.c.Sleep(ctx, req.Name); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.c.Get(ctx, req.Name); got.State != api.StateSleeping {
		t.Fatalf("after sleep: %s", got.State)
	}
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: req.Name}); err != nil {
		t.Fatalf("wake: %v", err)
	}
	if out := run(t, req.Name, fetchIndex); out.ExitCode != 0 || strings.TrimSpace(out.Stdout) != "hello-start" {
		t.Fatalf("right after the wake: %+v", out)
	}
	p2, err := d.c.GetProcess(ctx, req.Name, api.StartProcessID)
	if err != nil || p2.Status != api.ProcessRunning || !p2.StartedAt.After(p.StartedAt) {
		t.Fatalf("start process after the wake: %+v (%v); before: %+v", p2, err, p)
	}
}

// A shell start command with a log probe: the create waits for the line
// (the command prints it only after 2 s), and the probe's failures come
// back with their kinds while the sandbox keeps running.
func TestStartCommandReadiness(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	sandbox(t, api.CreateSandboxRequest{Name: "it-start-log",
		Start: &api.StartCommand{Command: "sleep 2; echo warming; echo ready now > /tmp/ready; echo server ready; exec sleep 600",
			Ready: &api.Readiness{Log: &api.WaitLogRequest{Pattern: "server ready", TimeoutMs: 30000}}}})
	took := time.Since(t0)
	if out := run(t, "it-start-log", "cat /tmp/ready"); strings.TrimSpace(out.Stdout) != "ready now" {
		t.Fatalf("the create answered before the command was ready (after %s): %+v", took, out)
	}
	if took < 2*time.Second {
		t.Fatalf("the create took %s, less than the command's 2 s to be ready", took)
	}

	// It exits before it is ready: 409, and the sandbox runs on.
	_, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-start-exit",
		Start: &api.StartCommand{Command: "echo giving up; exit 3",
			Ready: &api.Readiness{Log: &api.WaitLogRequest{Pattern: "never printed", TimeoutMs: 30000}}}})
	t.Cleanup(func() { _ = d.c.Destroy(context.Background(), "it-start-exit") })
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "start command was not ready") {
		t.Fatalf("a start command that exits: %v, want failed precondition naming the start command", err)
	}
	if sb, gerr := d.c.Get(ctx, "it-start-exit"); gerr != nil || sb.State != api.StateRunning {
		t.Fatalf("after a failed readiness the sandbox should run: %+v %v", sb, gerr)
	}
	if logs, lerr := d.c.ProcessLogs(ctx, "it-start-exit", api.StartProcessID); lerr != nil || !strings.Contains(string(logs.Stdout), "giving up") {
		t.Fatalf("start command logs: %+v %v", logs, lerr)
	}

	// Never ready: 504 after the probe's own timeout.
	_, _, err = d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-start-slow",
		Start: &api.StartCommand{Command: "exec sleep 600",
			Ready: &api.Readiness{Port: &api.WaitPortRequest{Port: 8081, Mode: "tcp", TimeoutMs: 1500}}}})
	t.Cleanup(func() { _ = d.c.Destroy(context.Background(), "it-start-slow") })
	if !errdefs.IsKind(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("a start command never ready: %v, want deadline exceeded", err)
	}
}

// `start: image` on an image with neither ENTRYPOINT nor CMD is refused
// before anything is made: the name stays free. Negative control: the
// same image with a command starts.
func TestStartImageWithoutCommandRefused(t *testing.T) {
	buildStartImage(t, "it-start:none", "FROM debian-trixie\nENTRYPOINT []\n")
	ctx := context.Background()
	_, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: "it-start-none", Image: "it-start:none", Start: &api.StartCommand{Image: true}})
	if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "neither ENTRYPOINT nor CMD") {
		_ = d.c.Destroy(ctx, "it-start-none")
		t.Fatalf("start image without a command: %v, want invalid argument", err)
	}
	if _, err := d.c.Get(ctx, "it-start-none"); !errors.Is(err, errdefs.ErrNotFound) && !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("the refused create left a sandbox: %v", err)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-start-none", Image: "it-start:none",
		Start: &api.StartCommand{Command: "echo started; exec sleep 600", Ready: &api.Readiness{Log: &api.WaitLogRequest{Pattern: "started"}}}})
}

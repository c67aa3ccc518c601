package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// The task benchmark (berth bench --task): what a user waits for is "my
// app is ready", not a process. Every sample is timed from its request
// (the create, or for a wake the first exec) to three points:
//
//	shell: an exec of `echo` through /bin/sh answered;
//	deps:  the dependencies are present: node_modules has every file, the
//	       venv's site-packages has every file and its Python imports all
//	       packages (from zero and from the pool this includes uploading
//	       and unpacking the deps tarball and `python3 -m venv`);
//	app:   the dev server (node server.js, loading Workspace.Modules
//	       files) answered GET through its preview URL with the body only
//	       a complete node_modules computes.

// Task scenario names.
const (
	TaskZero     = "zero"
	TaskSnapshot = "snapshot"
	TaskWake     = "wake"
	TaskPool     = "pool"
)

// TaskScenario is one way to get the app ready, n samples.
type TaskScenario struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	Shell *Stat  `json:"shell_ms"`
	Deps  *Stat  `json:"deps_ms"`
	App   *Stat  `json:"app_ms"`
	// Boot is the dev server's own start (TaskSample.Boot).
	Boot *Stat `json:"server_boot_ms"`
	// First is the first sample alone (from a snapshot: the first restore
	// on this host, which builds the snapshot's mounted image).
	First *TaskSample `json:"first,omitempty"`
	// AppVsZero is App.P50 over the from-zero App.P50 of the same
	// engine; AppVsDocker App.P50 over the Docker scenario of the same
	// name (berth only).
	AppVsZero   *float64 `json:"app_vs_zero,omitempty"`
	AppVsDocker *float64 `json:"app_vs_docker,omitempty"`
	// Target is the goal for this scenario ("" when none) and Met whether
	// App.P50 reached it.
	Target string `json:"target,omitempty"`
	Met    *bool  `json:"met,omitempty"`
	Note   string `json:"note,omitempty"`
	// samples in order (not in the JSON: the Stats summarize them).
	samples []TaskSample
}

// TaskSample is one sample's phases, in ms from its request.
type TaskSample struct {
	Shell float64 `json:"shell_ms"`
	Deps  float64 `json:"deps_ms"`
	App   float64 `json:"app_ms"`
	// Boot is the part of the app phase from the start of the dev server
	// to its port accepting, the expose call included (not a phase: where
	// the app phase goes; Docker's twin ends at the first answer).
	Boot float64 `json:"server_boot_ms"`
}

// PoolSaving is what claiming a pool member saves over a create from
// zero, p50 against p50, for each phase.
type PoolSaving struct {
	Shell float64 `json:"shell_ms"`
	Deps  float64 `json:"deps_ms"`
	App   float64 `json:"app_ms"`
}

// TaskReport is the JSON form of berth bench --task.
type TaskReport struct {
	Image     string         `json:"image"`
	Instance  string         `json:"instance"`
	Workspace *Workspace     `json:"workspace"`
	Scenarios []TaskScenario `json:"scenarios"`
	// Docker holds the same steps with docker run (zero), docker commit
	// + run (snapshot) and docker stop + start (wake), when an engine
	// answers.
	Docker    []TaskScenario `json:"docker,omitempty"`
	PoolSaves *PoolSaving    `json:"pool_saves,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
}

// TaskTarget is the goal: app-ready from the pool and from a snapshot
// within a fifth of from zero.
const TaskTarget = 0.2

func (r *TaskReport) scenario(list []TaskScenario, name string) *TaskScenario {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

// finish fills the Stats from the samples and computes ratios, target
// verdicts and the pool's saving.
func (r *TaskReport) finish() {
	for k, list := range [][]TaskScenario{r.Scenarios, r.Docker} {
		docker := k == 1
		for i := range list {
			s := &list[i]
			if len(s.samples) == 0 {
				continue
			}
			var sh, de, ap, bo []time.Duration
			for _, x := range s.samples {
				sh, de, ap, bo = append(sh, msDur(x.Shell)), append(de, msDur(x.Deps)), append(ap, msDur(x.App)), append(bo, msDur(x.Boot))
			}
			s.Shell, s.Deps, s.App, s.Boot = summarize(sh), summarize(de), summarize(ap), summarize(bo)
			if s.Name == TaskSnapshot {
				f := s.samples[0]
				s.First = &f
			}
		}
		zero := r.scenario(list, TaskZero)
		for i := range list {
			s := &list[i]
			if s.Name == TaskZero || s.App == nil || zero == nil || zero.App == nil {
				continue
			}
			s.AppVsZero = ratio(s.App.P50, zero.App.P50)
			if !docker && (s.Name == TaskSnapshot || s.Name == TaskPool) {
				s.Target = fmt.Sprintf("app ≤ %.0f%% of from zero", TaskTarget*100)
				met := s.AppVsZero != nil && *s.AppVsZero <= TaskTarget
				s.Met = &met
			}
		}
	}
	for i := range r.Scenarios {
		s := &r.Scenarios[i]
		if d := r.scenario(r.Docker, s.Name); d != nil && d.App != nil && s.App != nil {
			s.AppVsDocker = ratio(s.App.P50, d.App.P50)
		}
	}
	zero, pool := r.scenario(r.Scenarios, TaskZero), r.scenario(r.Scenarios, TaskPool)
	if zero != nil && pool != nil && zero.App != nil && pool.App != nil {
		r.PoolSaves = &PoolSaving{
			Shell: round(zero.Shell.P50 - pool.Shell.P50),
			Deps:  round(zero.Deps.P50 - pool.Deps.P50),
			App:   round(zero.App.P50 - pool.App.P50),
		}
	}
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Paths in the sandbox (and the Docker container).
const (
	taskAppDir = "/home/user/app"
	taskDeps   = "/home/user/.bench-deps.tgz"
)

// unpackScript unpacks the uploaded tarball into the app dir and makes
// the venv, then runs the deps check. (rm -r, not rmdir: builds before
// seccomp allowed rmdir(2) fail coreutils' rmdir with ENOSYS.)
func unpackScript(w *Workspace) string {
	return fmt.Sprintf(`set -e
mkdir -p %[1]s
cd %[1]s
tar -xzf %[2]s
rm -f %[2]s
python3 -m venv --without-pip .venv
sp=$(echo .venv/lib/python3*/site-packages)
mv pysite/* "$sp"/
rm -r pysite
`, taskAppDir, taskDeps) + checkScript(w)
}

// checkScript verifies the dependencies: every file is there and the
// venv's Python imports every package; it prints their value sum.
func checkScript(w *Workspace) string {
	var sum []string
	for _, p := range w.PyImports {
		sum = append(sum, p+".VALUE")
	}
	return fmt.Sprintf(`set -e
cd %[1]s
sp=$(echo .venv/lib/python3*/site-packages)
n=$(find node_modules -type f | wc -l)
test "$n" -eq %[2]d || { echo "node_modules: want %[2]d files, found $n" >&2; exit 1; }
n=$(find "$sp" -type f ! -name '*.pyc' | wc -l)
test "$n" -eq %[3]d || { echo "site-packages: want %[3]d files, found $n" >&2; exit 1; }
.venv/bin/python -c 'import %[4]s; print(%[5]s)'
`, taskAppDir, w.NodeFiles, w.PyFiles, strings.Join(w.PyImports, ", "), strings.Join(sum, " + "))
}

// taskRun is one run's shared state.
type taskRun struct {
	c     *client.Client
	o     Options
	w     *Workspace
	run   string
	token string
	http  *http.Client
	logf  func(string, ...any)
}

// sample times one way to the app: create (nil for a wake: the shell
// exec wakes the sandbox), the shell, the deps (upload and unpack, or
// only the check), the app through its preview URL.
func (t *taskRun) sample(ctx context.Context, name string, create func() error, unpack bool) (TaskSample, error) {
	var s TaskSample
	t0 := time.Now()
	if create != nil {
		if err := create(); err != nil {
			return s, fmt.Errorf("create %s: %w", name, err)
		}
	}
	res, err := t.c.Exec(ctx, name, api.ExecRequest{Command: "echo shell-ok"})
	if err != nil || res.ExitCode != 0 || res.Stdout != "shell-ok\n" {
		return s, fmt.Errorf("shell in %s: %+v %w", name, res, err)
	}
	s.Shell = ms(time.Since(t0))
	script := checkScript(t.w)
	if unpack {
		if err := t.c.WriteFile(ctx, name, taskDeps, bytes.NewReader(t.w.Tarball), 0o644); err != nil {
			return s, fmt.Errorf("upload the deps tarball to %s: %w", name, err)
		}
		script = unpackScript(t.w)
	}
	res, err = t.c.Exec(ctx, name, api.ExecRequest{Command: script, TimeoutMs: 300000})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != t.w.PyValue {
		return s, fmt.Errorf("deps in %s (want %s): %+v %w", name, t.w.PyValue, res, err)
	}
	s.Deps = ms(time.Since(t0))
	tb := time.Now()
	if _, err := t.c.StartProcess(ctx, name, api.StartProcessRequest{ID: "dev", Command: "node server.js", Cwd: taskAppDir,
		Env: api.Env{"PORT": fmt.Sprint(serverPort)}}); err != nil {
		return s, fmt.Errorf("start the dev server in %s: %w", name, err)
	}
	p, err := t.c.ExposePort(ctx, name, api.ExposePortRequest{Port: serverPort, Token: t.token})
	if err != nil {
		return s, fmt.Errorf("expose the dev server of %s: %w", name, err)
	}
	if _, err := t.c.WaitForPort(ctx, name, "dev", api.WaitPortRequest{Port: serverPort, Mode: "tcp", IntervalMs: 10, TimeoutMs: 60000}); err != nil {
		logs, _ := t.c.ProcessLogs(ctx, name, "dev")
		return s, fmt.Errorf("dev server of %s: %w (stdout %q, stderr %q)", name, err, logs.Stdout, logs.Stderr)
	}
	s.Boot = ms(time.Since(tb))
	if err := t.getApp(ctx, p.PathURL); err != nil {
		return s, fmt.Errorf("dev server of %s through %s: %w", name, p.PathURL, err)
	}
	s.App = ms(time.Since(t0))
	return s, nil
}

// getApp GETs the preview URL until it answers 200 with the expected
// body (at most 10 s; 5 ms between tries).
func (t *taskRun) getApp(ctx context.Context, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := t.http.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(b) == t.w.ServerBody {
				return nil
			}
			last = fmt.Sprintf("%d %q (want 200 %q)", resp.StatusCode, b, t.w.ServerBody)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within 10 s: %s", last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// RunTask runs the task benchmark and prints its report.
func RunTask(ctx context.Context, c *client.Client, o Options, out io.Writer) error {
	if o.N <= 0 {
		o.N = 5
	}
	if o.Image == "" {
		o.Image = "debian-trixie"
	}
	if o.Instance == "" {
		o.Instance = "standard-2"
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	w, err := GenerateWorkspace(o.Workspace)
	if err != nil {
		return err
	}
	run := fmt.Sprintf("%06x", time.Now().UnixNano()&0xffffff)
	t := &taskRun{c: c, o: o, w: w, run: run, token: "benchtask" + run, logf: logf,
		http: &http.Client{Timeout: 30 * time.Second}}
	rep := &TaskReport{Image: o.Image, Instance: o.Instance, Workspace: w}
	logf("task: workspace of %d files (%d in node_modules, %d in the venv), %.1f MB, tarball %.1f MB",
		w.Files(), w.NodeFiles, w.PyFiles, float64(w.Bytes)/1e6, float64(len(w.Tarball))/1e6)

	pool, note, err := t.findPool(ctx)
	if err != nil {
		return err
	}
	if note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	create := func(name string, req api.CreateSandboxRequest) func() error {
		return func() error { _, _, err := c.GetOrCreate(ctx, req); return err }
	}
	destroy := func(name string) { _ = c.Destroy(context.WithoutCancel(ctx), name) }

	// From zero.
	zero := TaskScenario{Name: TaskZero, Label: "from zero (create, upload + unpack the deps tarball)"}
	var before api.Pool
	if pool != nil {
		before, _ = poolOf(ctx, c, o.Image, pool.Instance)
	}
	logf("task: from zero, %d samples", o.N)
	for i := 0; i < o.N; i++ {
		name := fmt.Sprintf("bench-%s-task-zero-%d", run, i)
		s, err := t.sample(ctx, name, create(name, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation}), true)
		destroy(name)
		if err != nil {
			return err
		}
		zero.samples = append(zero.samples, s)
	}
	if pool != nil {
		if after, err := poolOf(ctx, c, o.Image, pool.Instance); err == nil && after.Claims != before.Claims {
			return fmt.Errorf("from-zero creates claimed %d members of the pool of %s/%s: the from-zero figures are not from zero; measure with --instance of a type no pool serves", after.Claims-before.Claims, o.Image, pool.Instance)
		}
	}
	rep.Scenarios = append(rep.Scenarios, zero)

	// A ready workspace: the snapshot's source, then the wake samples.
	src := fmt.Sprintf("bench-%s-task-src", run)
	defer destroy(src)
	logf("task: preparing a ready workspace in %s, then its snapshot", src)
	if _, err := t.sample(ctx, src, create(src, api.CreateSandboxRequest{Name: src, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation}), true); err != nil {
		return err
	}
	sn, err := c.Snapshot(ctx, src, api.SnapshotRequest{Name: "bench-task-" + run})
	if err != nil {
		return fmt.Errorf("snapshot the ready workspace: %w", err)
	}
	defer c.DeleteSnapshot(context.WithoutCancel(ctx), sn.ID)
	snap := TaskScenario{Name: TaskSnapshot, Label: "from a snapshot of a ready workspace"}
	logf("task: from the snapshot (%.1f MB), %d samples; the first is the first restore on this host", float64(sn.SizeBytes)/1e6, o.N)
	for i := 0; i < o.N; i++ {
		name := fmt.Sprintf("bench-%s-task-snap-%d", run, i)
		s, err := t.sample(ctx, name, create(name, api.CreateSandboxRequest{Name: name, Snapshot: sn.ID, Instance: o.Instance}), false)
		destroy(name)
		if err != nil {
			return err
		}
		snap.samples = append(snap.samples, s)
	}
	rep.Scenarios = append(rep.Scenarios, snap)

	wake := TaskScenario{Name: TaskWake, Label: "wake after sleep (first exec wakes it)"}
	logf("task: wake after sleep, %d samples", o.N)
	for i := 0; i < o.N; i++ {
		if err := c.Sleep(ctx, src); err != nil {
			return fmt.Errorf("sleep %s: %w", src, err)
		}
		s, err := t.sample(ctx, src, nil, false)
		if err != nil {
			return err
		}
		wake.samples = append(wake.samples, s)
	}
	rep.Scenarios = append(rep.Scenarios, wake)

	if pool != nil {
		ps := TaskScenario{Name: TaskPool, Label: fmt.Sprintf("from the warm pool (claim, upload + unpack; instance %s)", pool.Instance),
			Note: "a claim never carries a snapshot's files (pools are of images only), so the pool saves the start, not the unpack"}
		logf("task: from the warm pool of %s/%s, %d samples", o.Image, pool.Instance, o.N)
		p0, _ := poolOf(ctx, c, o.Image, pool.Instance)
		for i := 0; i < o.N; i++ {
			if _, err := waitReady(ctx, c, o.Image, pool.Instance, 1); err != nil {
				return err
			}
			name := fmt.Sprintf("bench-%s-task-pool-%d", run, i)
			s, err := t.sample(ctx, name, create(name, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: pool.Instance}), true)
			destroy(name)
			if err != nil {
				return err
			}
			ps.samples = append(ps.samples, s)
		}
		if p1, err := poolOf(ctx, c, o.Image, pool.Instance); err == nil {
			if miss := p1.Misses - p0.Misses; miss > 0 {
				ps.Note += fmt.Sprintf("; %d of %d creates found the pool empty and started cold", miss, o.N)
			}
		}
		rep.Scenarios = append(rep.Scenarios, ps)
	}

	switch {
	case o.NoDocker:
		rep.Notes = append(rep.Notes, "docker baseline skipped (--no-docker)")
	case dockerUp(ctx):
		d, err := dockerTask(ctx, t)
		if err != nil {
			rep.Notes = append(rep.Notes, "docker baseline failed: "+err.Error())
		}
		rep.Docker = d
	default:
		rep.Notes = append(rep.Notes, "docker baseline: no Docker engine answers on this host")
	}
	rep.finish()
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printTask(out, rep)
	return nil
}

// findPool picks the pool of the image that the pool scenario claims
// from: the one with instance --pool, else the only one whose instance
// differs from --instance. A pool that would serve the from-zero creates
// (its instance is --instance, or any) is an error: they would not be
// from zero.
func (t *taskRun) findPool(ctx context.Context) (*api.Pool, string, error) {
	list, err := t.c.ListPools(ctx)
	if err != nil {
		if t.o.PoolInstance != "" {
			return nil, "", fmt.Errorf("list the daemon's pools: %w", err)
		}
		return nil, "pool scenario skipped: cannot list the daemon's pools (" + err.Error() + ")", nil
	}
	var other []api.Pool
	for _, p := range list.Pools {
		if p.Image != t.o.Image {
			continue
		}
		if p.Instance == "" || p.Instance == t.o.Instance {
			return nil, "", fmt.Errorf("the daemon's pool of %s serves instance %q (\"\" is any): from-zero creates with --instance %s would claim from it; measure with an --instance no pool serves and --pool TYPE", p.Image, p.Instance, t.o.Instance)
		}
		if t.o.PoolInstance == "" || p.Instance == t.o.PoolInstance {
			other = append(other, p)
		}
	}
	switch {
	case len(other) == 1:
		return &other[0], "", nil
	case t.o.PoolInstance != "":
		return nil, "", fmt.Errorf("the daemon keeps no warm pool of %s with instance=%s (berth serve --pool %s=4,instance=%s)", t.o.Image, t.o.PoolInstance, t.o.Image, t.o.PoolInstance)
	case len(other) > 1:
		return nil, "", fmt.Errorf("the daemon keeps %d pools of %s; name one with --pool TYPE", len(other), t.o.Image)
	}
	return nil, fmt.Sprintf("pool scenario skipped: the daemon keeps no pool of %s (berth serve --pool %s=4,instance=standard-3, then --pool standard-3)", t.o.Image, t.o.Image), nil
}

func printTask(out io.Writer, r *TaskReport) {
	w := r.Workspace
	fmt.Fprintf(out, "berth bench --task — image %s, instance %s\n", r.Image, r.Instance)
	fmt.Fprintf(out, "workspace: %d files (%d in node_modules, %d in the venv, %d of the app), %.1f MB; deps tarball %.1f MB; the dev server loads %d modules\n\n",
		w.Files(), w.NodeFiles, w.PyFiles, w.AppFiles, float64(w.Bytes)/1e6, float64(len(w.Tarball))/1e6, w.Modules)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario (ms from the request, p50 / p95)\tshell\tdeps\tapp ready\t(server boot)\tn\tapp vs zero\tapp vs docker\ttarget")
	f := func(s *Stat) string {
		if s == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f / %.0f", s.P50, s.P95)
	}
	x := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f×", *v)
	}
	rows := func(list []TaskScenario, first string) {
		for _, s := range list {
			n := 0
			if s.App != nil {
				n = s.App.N
			}
			target := ""
			if s.Met != nil {
				target = s.Target + map[bool]string{true: ": met", false: ": NOT met"}[*s.Met]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Label, f(s.Shell), f(s.Deps), f(s.App), f(s.Boot), n, x(s.AppVsZero), x(s.AppVsDocker), target)
			if s.First != nil {
				fmt.Fprintf(tw, "  %s\t%.0f\t%.0f\t%.0f\t%.0f\t1\t\t\t\n", first, s.First.Shell, s.First.Deps, s.First.App, s.First.Boot)
			}
		}
	}
	rows(r.Scenarios, "first restore on this host")
	rows(r.Docker, "first run of the commit")
	tw.Flush()
	if p := r.PoolSaves; p != nil {
		fmt.Fprintf(out, "\nthe pool saves (p50 from zero − p50 from the pool): shell %.0f ms, deps %.0f ms, app ready %.0f ms\n", p.Shell, p.Deps, p.App)
	}
	for _, s := range append(append([]TaskScenario{}, r.Scenarios...), r.Docker...) {
		if s.Note != "" {
			fmt.Fprintf(out, "%s: %s\n", s.Name, s.Note)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(out, n)
	}
}

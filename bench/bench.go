package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// Options configure a run.
type Options struct {
	N    int  // samples per figure (TTI uses N sandboxes, sequentially)
	JSON bool // print one JSON object instead of a table
	// Snapshots adds the snapshot scenario (200 MB / 10k files).
	Snapshots bool
	// SleepTiers adds the sleep-tier scenario (sleep.go): freeze and thaw
	// beside the stop tier's sleep and wake, N rounds each.
	SleepTiers bool
	// Burst adds the burst scenario: this many sandboxes created at once,
	// then measured while they all run idle (0: skip).
	Burst     int
	Image     string // default debian-trixie
	Instance  string // default standard-2 (one full vCPU)
	Isolation string // runc (default) or gvisor
	// PoolInstance adds the warm-pool scenario (pool.go): the daemon keeps
	// a pool of Image with this instance type ("": skip).
	PoolInstance string
	// PoolBurst is the warm-pool scenario's burst (0: Burst); past the
	// pool's size it measures admission control (per-status counts).
	PoolBurst int
	// Task runs the task benchmark instead (task.go, RunTask): app-ready
	// of a generated Node + Python workspace from zero, a snapshot, a wake
	// and the pool; Workspace sizes it (zero: DefaultWorkspace).
	Task      bool
	Workspace WorkspaceSpec
	// NoDocker skips the Docker baseline of the task benchmark.
	NoDocker bool
	// DataDir and Runtime let the baseline build a raw runc bundle from the
	// same image layers the server uses. Empty Runtime skips the baseline.
	DataDir string
	Runtime string
	// DaemonPid, if set, adds the daemon's own CPU time (with the runc
	// commands it reaped) to the CPU figures; host-wide CPU is always
	// measured.
	DaemonPid int
	// SandboxCgroup, if set, is the cgroup dir above every sandbox's
	// (e.g. /sys/fs/cgroup/berth, or cpuacct/berth on cgroup v1): adds
	// their CPU time to the CPU figures.
	SandboxCgroup string
	// Idle runs the idle scenario instead (idle.go, RunIdle): this many
	// sandboxes (default instance lite) made IdleParallel at a time, held
	// idle together for IdleWindow and measured; creating stops early once
	// MemAvailable falls under IdleMinAvailMiB. IdleSample of them must
	// answer an exec.
	Idle            int
	IdleParallel    int
	IdleWindow      time.Duration
	IdleSample      int
	IdleMinAvailMiB int
	Logf            func(format string, args ...any)
}

// Report is the JSON form of a run.
type Report struct {
	TTI *Stat `json:"tti_ms"`
	// TTICPU is the CPU time of one sequential create → node -v →
	// destroy cycle of the TTI figure.
	TTICPU    *CPUPer         `json:"tti_cpu_ms,omitempty"`
	Exec      *Stat           `json:"exec_ms"`
	Wake      *Stat           `json:"wake_ms"`
	Baselines Baselines       `json:"baselines"`
	Ratios    Ratios          `json:"ratios"`
	Instance  string          `json:"instance"`
	Image     string          `json:"image"`
	Isolation string          `json:"isolation"`
	Snapshot  *SnapshotReport `json:"snapshot,omitempty"`
	// SleepTiers is the sleep-tier scenario (Options.SleepTiers).
	SleepTiers *SleepTiersReport `json:"sleep_tiers,omitempty"`
	Burst      *BurstReport      `json:"burst,omitempty"`
	Pool       *PoolReport       `json:"pool,omitempty"`
	// Ratios of the pool's figures to the cold ones of this run.
	PoolTTIvsCold    *float64 `json:"pool_tti_vs_cold,omitempty"`
	PoolTTIvsRuncRun *float64 `json:"pool_tti_vs_runc_run,omitempty"`
}

// Baselines are the same operations done with plain tools in the same run.
type Baselines struct {
	RuncRun    *Stat  `json:"runc_run_ms"`
	DockerRun  *Stat  `json:"docker_run_ms"`
	DockerExec *Stat  `json:"docker_exec_ms"`
	Note       string `json:"note,omitempty"`
}

// Ratios are berth's p50 divided by the baseline's p50 (lower is better).
type Ratios struct {
	TTIvsRuncRun   *float64 `json:"tti_vs_runc_run,omitempty"`
	TTIvsDockerRun *float64 `json:"tti_vs_docker_run,omitempty"`
	ExecVsDocker   *float64 `json:"exec_vs_docker_exec,omitempty"`
}

// Run measures and prints. Sandboxes it creates are named bench-* and are
// destroyed afterwards.
func Run(ctx context.Context, c *client.Client, o Options, out io.Writer) error {
	if o.N <= 0 {
		o.N = 50
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
	if o.Isolation == "" {
		o.Isolation = api.IsolationRunc
	}
	rep := Report{Instance: o.Instance, Image: o.Image, Isolation: o.Isolation}
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)

	// Time to interactive: create by name → `node -v` exits 0.
	logf("time to interactive: %d sandboxes, sequentially", o.N)
	var tti []time.Duration
	cpu0, cpuOK := readCPU(o.DaemonPid, o.SandboxCgroup)
	for i := 0; i < o.N; i++ {
		name := fmt.Sprintf("bench-%s-tti-%d", run, i)
		t0 := time.Now()
		if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation}); err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"node", "-v"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("node -v in %s: %+v %v", name, res, err)
		}
		tti = append(tti, d)
		if err := c.Destroy(ctx, name); err != nil {
			return err
		}
	}
	rep.TTI = summarize(tti)
	if cpu1, ok := readCPU(o.DaemonPid, o.SandboxCgroup); ok && cpuOK {
		rep.TTICPU = cpuPer(cpu0, cpu1, o.N)
	}

	// Exec round trip of `true` in one running sandbox.
	name := fmt.Sprintf("bench-%s-exec", run)
	if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation}); err != nil {
		return err
	}
	defer c.Destroy(context.WithoutCancel(ctx), name)
	logf("exec round trip: %d × true", o.N)
	var execs []time.Duration
	for i := 0; i < o.N+5; i++ {
		t0 := time.Now()
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("exec true: %+v %v", res, err)
		}
		if i >= 5 { // warm-up
			execs = append(execs, d)
		}
	}
	rep.Exec = summarize(execs)

	// Wake: sleep (untimed), then time the first exec.
	wakes := o.N / 2
	if wakes < 5 {
		wakes = 5
	}
	logf("wake from sleep: %d rounds", wakes)
	if err := c.WriteFile(ctx, name, "bench-marker", strings.NewReader("kept"), 0o644); err != nil {
		return err
	}
	var wake []time.Duration
	for i := 0; i < wakes; i++ {
		if err := c.Sleep(ctx, name); err != nil {
			return err
		}
		t0 := time.Now()
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"cat", "bench-marker"}})
		d := time.Since(t0)
		if err != nil || res.Stdout != "kept" {
			return fmt.Errorf("first exec after wake: %+v %v", res, err)
		}
		wake = append(wake, d)
	}
	rep.Wake = summarize(wake)

	if o.Snapshots {
		sr, err := snapshotScenario(ctx, c, o, run, logf)
		if err != nil {
			return fmt.Errorf("snapshot scenario: %w", err)
		}
		rep.Snapshot = sr
	}
	if o.SleepTiers {
		sr, err := sleepTiersScenario(ctx, c, o, run, o.N, logf)
		if err != nil {
			return fmt.Errorf("sleep tiers scenario: %w", err)
		}
		rep.SleepTiers = sr
	}
	if o.Burst > 0 {
		br, err := burstScenario(ctx, c, o, run, o.Burst, logf)
		if err != nil {
			return fmt.Errorf("burst scenario: %w", err)
		}
		rep.Burst = br
	}
	if o.PoolInstance != "" {
		pr, err := poolScenario(ctx, c, o, run, logf)
		if err != nil {
			return fmt.Errorf("pool scenario: %w", err)
		}
		rep.Pool = pr
	}
	rep.Baselines = baselines(ctx, o, logf)
	if rep.Pool != nil && rep.Pool.TTI != nil {
		if rep.TTI != nil {
			rep.PoolTTIvsCold = ratio(rep.Pool.TTI.P50, rep.TTI.P50)
		}
		if rep.Baselines.RuncRun != nil {
			rep.PoolTTIvsRuncRun = ratio(rep.Pool.TTI.P50, rep.Baselines.RuncRun.P50)
		}
	}
	if rep.Baselines.RuncRun != nil && rep.TTI != nil {
		rep.Ratios.TTIvsRuncRun = ratio(rep.TTI.P50, rep.Baselines.RuncRun.P50)
	}
	if rep.Baselines.DockerRun != nil && rep.TTI != nil {
		rep.Ratios.TTIvsDockerRun = ratio(rep.TTI.P50, rep.Baselines.DockerRun.P50)
	}
	if rep.Baselines.DockerExec != nil && rep.Exec != nil {
		rep.Ratios.ExecVsDocker = ratio(rep.Exec.P50, rep.Baselines.DockerExec.P50)
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printTable(out, rep)
	return nil
}

func daemonNote(c *CPUPer) string {
	var parts []string
	if c.DaemonMs != nil {
		parts = append(parts, "the daemon with its runc commands")
	}
	if c.SandboxesMs != nil {
		parts = append(parts, "the sandboxes' cgroups")
	}
	if len(parts) == 0 {
		return ""
	}
	return "; of it " + strings.Join(parts, ", ")
}

func cpuText(c *CPUPer) string {
	s := fmt.Sprintf("%.1f", c.HostMs)
	var parts []string
	if c.DaemonMs != nil {
		parts = append(parts, fmt.Sprintf("%.1f", *c.DaemonMs))
	}
	if c.SandboxesMs != nil {
		parts = append(parts, fmt.Sprintf("%.1f", *c.SandboxesMs))
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	r := round(a / b)
	return &r
}

func printTable(out io.Writer, r Report) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "berth bench — image %s, instance %s\n\n", r.Image, r.Instance)
	fmt.Fprintln(tw, "figure\tp50 ms\tp95 ms\tn\tbaseline p50 ms\tratio (berth/baseline)\ttarget")
	row := func(label string, s *Stat, base string, bs *Stat, target string) {
		if s == nil {
			return
		}
		b, rt := "-", "-"
		if bs != nil {
			b = fmt.Sprintf("%.1f (%s)", bs.P50, base)
			rt = fmt.Sprintf("%.2f×", s.P50/bs.P50)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%s\t%s\t%s\n", label, s.P50, s.P95, s.N, b, rt, target)
	}
	row("time to interactive (create → node -v)", r.TTI, "runc run node -v", r.Baselines.RuncRun, "p50 ≤ 150 ms, ≤ 1.0× runc run")
	if c := r.TTICPU; c != nil {
		fmt.Fprintf(tw, "  CPU per create → node -v → destroy (ms, host-wide%s)\t%s\t\t%d\t\t\t\n", daemonNote(c), cpuText(c), c.N)
	}
	if r.Baselines.DockerRun != nil {
		row("time to interactive vs docker", r.TTI, "docker run", r.Baselines.DockerRun, "≥ 4× faster")
	}
	row("exec round trip (true)", r.Exec, "docker exec", r.Baselines.DockerExec, "p50 ≤ 5 ms")
	row("wake → first exec", r.Wake, "", nil, "p50 ≤ 200 ms")
	tw.Flush()
	if s := r.Snapshot; s != nil {
		fmt.Fprintf(out, "\nsnapshot scenario: %d files, %.0f MB workspace\n", s.WorkspaceFiles, float64(s.WorkspaceBytes)/1e6)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tms\tbaseline\tratio\ttarget")
		tar, rt := "-", "-"
		if s.TarZstd != nil {
			tar = fmt.Sprintf("%.0f ms (tar | zstd -1 on the host)", *s.TarZstd)
			rt = fmt.Sprintf("%.2f×", s.Snapshot / *s.TarZstd)
		}
		fmt.Fprintf(tw, "snapshot (API call; frozen %.1f ms; %.1f MB stored)\t%.0f\t%s\t%s\t≤ 2000\n", s.Freeze, float64(s.SnapshotBytes)/1e6, s.Snapshot, tar, rt)
		fmt.Fprintf(tw, "restore into a new sandbox → first exec (first on this host)\t%.0f\t%.0f ms (re-create from scratch)\t%.3f×\t≤ 1000\n", s.Restore, s.CreateFromZero, s.Restore/s.CreateFromZero)
		fmt.Fprintf(tw, "restore again (layer already on this host)\t%.0f\t\t\t≤ 1000\n", s.RestoreWarm)
		fmt.Fprintf(tw, "fork 10 (total)\t%.0f\t\t\t≤ 500\n", s.Fork10)
		fmt.Fprintf(tw, "fork 10 again, source unchanged (reuses the fork's snapshot)\t%.0f\t\t\t≤ 500\n", s.Fork10Unchanged)
		tw.Flush()
	}
	if r.SleepTiers != nil {
		printSleepTiers(out, r.SleepTiers)
	}
	if b := r.Burst; b != nil {
		fmt.Fprintf(out, "\nburst scenario: %d sandboxes created at once, %d ready, last after %.0f ms\n", b.N, b.OK, b.WallMs)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tp50\tp95 / max\tn\ttarget")
		if b.TTI != nil {
			fmt.Fprintf(tw, "create → node -v, each (ms)\t%.0f\t%.0f\t%d\tp50 ≤ 1000, all succeed\n", b.TTI.P50, b.TTI.P95, b.TTI.N)
		}
		if c := b.CPU; c != nil {
			fmt.Fprintf(tw, "CPU per start, create → node -v (ms, host-wide%s)\t%s\t\t%d\tlast ≤ 3000 ms needs ≤ %.0f ms per start on %d CPUs\n", daemonNote(c), cpuText(c), c.N, 3000*float64(b.CPUs)/float64(b.N), b.CPUs)
		}
		if b.AgentRSSKiB != nil {
			fmt.Fprintf(tw, "agent RSS while idle (MiB)\t%.1f\t%.1f\t%d\t≤ 8\n", float64(b.AgentRSSKiB.P50)/1024, float64(b.AgentRSSKiB.Max)/1024, b.AgentRSSKiB.N)
		}
		if b.AgentPrivateKiB != nil {
			fmt.Fprintf(tw, "  of it private, RssAnon (MiB; the rest is the shared agent binary)\t%.1f\t%.1f\t%d\t\n", float64(b.AgentPrivateKiB.P50)/1024, float64(b.AgentPrivateKiB.Max)/1024, b.AgentPrivateKiB.N)
		}
		if b.HostMiBPerSandbox != nil {
			fmt.Fprintf(tw, "host memory per idle sandbox (MiB, MemAvailable drop / n)\t%.1f\t\t%d\t\n", *b.HostMiBPerSandbox, b.OK)
		}
		tw.Flush()
		printStatus(out, b)
		for _, e := range b.Errors {
			fmt.Fprintf(out, "  failed: %s\n", e)
		}
	}
	if p := r.Pool; p != nil {
		fmt.Fprintf(out, "\nwarm pool scenario: instance %s, pool of %d; %d claims, %d misses\n", p.Instance, p.Size, p.Claims, p.Misses)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tp50 ms\tp99 ms\tn\tvs cold TTI\tvs runc run\ttarget")
		if p.TTI != nil {
			vc, vr := "-", "-"
			if r.PoolTTIvsCold != nil {
				vc = fmt.Sprintf("%.2f×", *r.PoolTTIvsCold)
			}
			if r.PoolTTIvsRuncRun != nil {
				vr = fmt.Sprintf("%.2f×", *r.PoolTTIvsRuncRun)
			}
			fmt.Fprintf(tw, "time to interactive from the pool\t%.1f\t%.1f\t%d\t%s\t%s\tp50 ≤ 15, p99 ≤ 40\n", p.TTI.P50, p.TTI.P99, p.TTI.N, vc, vr)
		}
		part := func(label string, s *Stat) {
			if s != nil {
				fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%d\t\t\t\n", label, s.P50, s.P99, s.N)
			}
		}
		part("of it: the create's answer", p.Create)
		part("  of that: the claim's binding at the server (journal)", p.ClaimServer)
		part("of it: the first node -v", p.FirstExec)
		part("node -v again in the same sandbox (long-running)", p.SecondExec)
		part("true in the same sandbox", p.SecondTrue)
		if b := p.Burst; b != nil && b.TTI != nil {
			what := "from a full pool"
			if b.N > p.Size {
				what = fmt.Sprintf("with a pool of %d", p.Size)
			}
			fmt.Fprintf(tw, "%d creates at once %s, each ready\t%.1f\t%.1f (last %.0f)\t%d\t\t\tall succeed, p50 ≤ 100, last ≤ 500\n", b.N, what, b.TTI.P50, b.TTI.P99, b.WallMs, b.OK)
			part("of it: the create's answer", b.Create)
			part("of it: the first node -v", b.FirstExec)
		}
		tw.Flush()
		if b := p.Burst; b != nil {
			printStatus(out, b)
			for _, e := range b.Errors {
				fmt.Fprintf(out, "  failed: %s\n", e)
			}
		}
	}
	if r.Baselines.Note != "" {
		fmt.Fprintf(out, "\n%s\n", r.Baselines.Note)
	}
}

// printStatus prints a burst's answers by status, its 429s' Retry-After
// and the sandboxes it left half-made.
func printStatus(out io.Writer, b *BurstReport) {
	codes := make([]string, 0, len(b.Status))
	for k := range b.Status {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	var parts []string
	for _, k := range codes {
		parts = append(parts, fmt.Sprintf("%s × %d", k, b.Status[k]))
	}
	fmt.Fprintf(out, "  answers: %s", strings.Join(parts, ", "))
	if b.RetryAfterS != nil {
		fmt.Fprintf(out, "; Retry-After %.0f-%.0f s (p50 %.0f)", b.RetryAfterS.Min, b.RetryAfterS.Max, b.RetryAfterS.P50)
	}
	fmt.Fprintf(out, "; 429 without Retry-After: %d; half-made sandboxes: %d\n", b.RetryAfterMissing, len(b.HalfMade))
	for _, h := range b.HalfMade {
		fmt.Fprintf(out, "  half-made: %s\n", h)
	}
}

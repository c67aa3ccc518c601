package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// IdleReport is the idle scenario (RunIdle): N sandboxes created a few at
// a time and left idle together, then measured and destroyed.
type IdleReport struct {
	N        int    `json:"n"`        // asked for
	OK       int    `json:"ok"`       // created and running
	Parallel int    `json:"parallel"` // creates in flight at once
	Image    string `json:"image"`
	Instance string `json:"instance"`
	// Stopped says why creating ended before N ("" when all N were made):
	// a create refused for good, or MemAvailable under the floor.
	Stopped string   `json:"stopped,omitempty"`
	Errors  []string `json:"errors,omitempty"` // the first few
	// Status counts the creates' answers by HTTP status; a 429 with
	// Retry-After is waited out and retried (Retries counts them).
	Status  map[string]int `json:"status"`
	Retries int            `json:"retries_429"`
	// Create is each create's answer time; CreateWallMs the time until the
	// last one answered.
	Create *Stat `json:"create_ms"`
	// CreateFirst and CreateLast are the first and the last tenth of the
	// creates, in the order they answered: a cost that grows with the
	// sandboxes on the host shows as the difference.
	CreateFirst  *Stat   `json:"create_first_tenth_ms"`
	CreateLast   *Stat   `json:"create_last_tenth_ms"`
	CreateWallMs float64 `json:"create_wall_ms"`
	CreatesPerS  float64 `json:"creates_per_s"`
	// Host memory: MemAvailable before the first create and with all OK
	// sandboxes idle, and the drop divided by OK (page cache, kernel
	// objects and the daemon's growth included).
	MemAvailableBeforeMiB float64  `json:"mem_available_before_mib"`
	MemAvailableIdleMiB   float64  `json:"mem_available_idle_mib"`
	HostMiBPerSandbox     *float64 `json:"host_mib_per_sandbox,omitempty"`
	// Cgroup memory of the sandboxes (--sandbox-cgroup, read from its
	// memory controller): the parent's total, and each sandbox's own.
	CgroupMiB           *float64 `json:"cgroup_mib,omitempty"`
	CgroupMiBPerSandbox *float64 `json:"cgroup_mib_per_sandbox,omitempty"`
	CgroupSandboxKiB    *KiBStat `json:"cgroup_sandbox_kib,omitempty"`
	// Running is how many of the run's sandboxes the API lists as running
	// while they idle (after the window).
	Running int `json:"running"`
	// Tasks is the number of processes and threads in the sandboxes'
	// cgroups (each counts against the host's kernel.pid_max).
	Tasks *int `json:"tasks,omitempty"`
	// The daemon (--daemon-pid): resident memory and open files before the
	// first create and with all sandboxes idle.
	DaemonRSSBeforeMiB *float64 `json:"daemon_rss_before_mib,omitempty"`
	DaemonRSSIdleMiB   *float64 `json:"daemon_rss_idle_mib,omitempty"`
	DaemonFDsBefore    *int     `json:"daemon_fds_before,omitempty"`
	DaemonFDsIdle      *int     `json:"daemon_fds_idle,omitempty"`
	// CPU while all sandboxes idle, over IdleWindowS, as % of one core:
	// host-wide (other work on the host included), the daemon's, the
	// sandboxes'.
	IdleWindowS     float64  `json:"idle_window_s"`
	HostCPUPct      *float64 `json:"host_cpu_pct,omitempty"`
	DaemonCPUPct    *float64 `json:"daemon_cpu_pct,omitempty"`
	SandboxesCPUPct *float64 `json:"sandboxes_cpu_pct,omitempty"`
	// Exec is `true` run in a random sample of the idle sandboxes.
	Exec       *Stat `json:"exec_ms"`
	ExecOK     int   `json:"exec_ok"`
	ExecSample int   `json:"exec_sample"`
	// Destroy: time until every destroy answered, how many failed, and
	// how many of the run's sandboxes the API still lists afterwards.
	DestroyWallMs float64 `json:"destroy_wall_ms"`
	DestroyFailed int     `json:"destroy_failed"`
	Left          int     `json:"left_after_destroy"`
}

// RunIdle runs the idle scenario: o.Idle sandboxes of o.Image and
// o.Instance (default lite), o.IdleParallel creates at a time, held idle
// together for o.IdleWindow while their footprint is read, a sample
// answering exec, then all destroyed. Creating stops early, with the
// reason in the report, when MemAvailable falls under o.IdleMinAvailMiB
// or a create is refused for good.
func RunIdle(ctx context.Context, c *client.Client, o Options, out io.Writer) error {
	if o.Idle <= 0 {
		return fmt.Errorf("idle scenario: N must be at least 1")
	}
	if o.Image == "" {
		o.Image = "debian-trixie"
	}
	if o.Instance == "" {
		o.Instance = "lite"
	}
	if o.IdleParallel <= 0 {
		o.IdleParallel = 4
	}
	if o.IdleWindow <= 0 {
		o.IdleWindow = 30 * time.Second
	}
	if o.IdleSample <= 0 {
		o.IdleSample = 20
	}
	if o.IdleMinAvailMiB <= 0 {
		o.IdleMinAvailMiB = 2048
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	run := fmt.Sprintf("%06x", time.Now().UnixNano()&0xffffff)
	prefix := fmt.Sprintf("bench-%s-idle-", run)
	rep := &IdleReport{N: o.Idle, Parallel: o.IdleParallel, Image: o.Image, Instance: o.Instance, Status: map[string]int{}}
	memBefore := memAvailableKiB()
	rep.MemAvailableBeforeMiB = round(float64(memBefore) / 1024)
	if o.DaemonPid > 0 {
		rep.DaemonRSSBeforeMiB, rep.DaemonFDsBefore = processRSSMiB(o.DaemonPid), processFDs(o.DaemonPid)
	}

	var (
		mu      sync.Mutex
		creates []time.Duration
		made    []string // created or maybe half-made: to destroy
		okNames []string // created
		stop    atomic.Bool
		next    atomic.Int64
	)
	fail := func(reason string) {
		mu.Lock()
		defer mu.Unlock()
		if rep.Stopped == "" {
			rep.Stopped = reason
		}
		stop.Store(true)
	}
	defer func() { // destroy whatever was made, also on an early return
		mu.Lock()
		names := append([]string(nil), made...)
		mu.Unlock()
		if len(names) == 0 {
			return
		}
		logf("idle: destroying %d sandboxes", len(names))
		var failed atomic.Int64
		t0 := time.Now()
		forEach(names, o.IdleParallel, func(name string) {
			if err := c.Destroy(context.WithoutCancel(ctx), name); err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
				failed.Add(1)
			}
		})
		rep.DestroyWallMs = round(float64(time.Since(t0).Microseconds()) / 1000)
		rep.DestroyFailed = int(failed.Load())
		if list, err := c.List(context.WithoutCancel(ctx), "", nil); err == nil {
			for _, sb := range list {
				if strings.HasPrefix(sb.Name, prefix) {
					rep.Left++
				}
			}
		} else {
			rep.Left = -1
		}
		printIdle(out, o.JSON, rep)
	}()

	logf("idle: creating %d %s sandboxes, %d at a time", o.Idle, o.Instance, o.IdleParallel)
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < o.IdleParallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= o.Idle {
					return
				}
				if avail := memAvailableKiB(); avail > 0 && avail/1024 < int64(o.IdleMinAvailMiB) {
					fail(fmt.Sprintf("MemAvailable %d MiB under the floor of %d MiB after %d creates", avail/1024, o.IdleMinAvailMiB, i))
					return
				}
				name := prefix + strconv.Itoa(i)
				for {
					start := time.Now()
					_, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation})
					d := time.Since(start)
					code := http.StatusCreated
					if err != nil {
						code = api.HTTPStatus(err)
					}
					mu.Lock()
					rep.Status[strconv.Itoa(code)]++
					if err == nil {
						creates = append(creates, d)
						made = append(made, name)
						okNames = append(okNames, name)
					} else if len(rep.Errors) < 5 {
						rep.Errors = append(rep.Errors, name+": "+err.Error())
					}
					mu.Unlock()
					if err == nil {
						break
					}
					if ra, ok := errdefs.RetryAfter(err); ok && code == http.StatusTooManyRequests && !stop.Load() {
						mu.Lock()
						rep.Retries++
						mu.Unlock()
						time.Sleep(min(ra, 5*time.Second))
						continue
					}
					// Refused for good (a real limit) or failed: keep what
					// exists and measure it. A failed create may still have
					// left a record: destroy it too.
					mu.Lock()
					made = append(made, name)
					mu.Unlock()
					fail(fmt.Sprintf("create %d (%s) answered %d: %v", i, name, code, err))
					return
				}
				if (i+1)%100 == 0 {
					logf("idle: %d created, %.0f s, MemAvailable %d MiB", i+1, time.Since(t0).Seconds(), memAvailableKiB()/1024)
				}
			}
		}()
	}
	wg.Wait()
	rep.CreateWallMs = round(float64(time.Since(t0).Microseconds()) / 1000)
	rep.Create = summarize(creates)
	if tenth := len(creates) / 10; tenth > 0 {
		rep.CreateFirst, rep.CreateLast = summarize(creates[:tenth]), summarize(creates[len(creates)-tenth:])
	}
	rep.OK = len(creates)
	if rep.CreateWallMs > 0 {
		rep.CreatesPerS = round(float64(rep.OK) / (rep.CreateWallMs / 1000))
	}
	if rep.OK == 0 {
		return fmt.Errorf("idle scenario: no sandbox was created: %s", rep.Stopped)
	}

	// Footprint while all of them idle.
	logf("idle: %d sandboxes idle; measuring for %s", rep.OK, o.IdleWindow)
	cpu0, cpuOK := readCPU(o.DaemonPid, o.SandboxCgroup)
	select {
	case <-time.After(o.IdleWindow):
	case <-ctx.Done():
		return ctx.Err()
	}
	cpu1, cpuOK1 := readCPU(o.DaemonPid, o.SandboxCgroup)
	rep.IdleWindowS = round(o.IdleWindow.Seconds())
	if cpuOK && cpuOK1 {
		pct := func(a, b float64) *float64 {
			if a < 0 || b < 0 {
				return nil
			}
			v := round((b - a) / (o.IdleWindow.Seconds() * 1000) * 100)
			return &v
		}
		rep.HostCPUPct, rep.DaemonCPUPct, rep.SandboxesCPUPct = pct(cpu0.HostMs, cpu1.HostMs), pct(cpu0.DaemonMs, cpu1.DaemonMs), pct(cpu0.SandboxesMs, cpu1.SandboxesMs)
	}
	if after := memAvailableKiB(); after > 0 && memBefore > 0 {
		rep.MemAvailableIdleMiB = round(float64(after) / 1024)
		v := round(float64(memBefore-after) / 1024 / float64(rep.OK))
		rep.HostMiBPerSandbox = &v
	}
	if memDir := memoryCgroup(o.SandboxCgroup); memDir != "" {
		if total, ok := cgroupMemory(memDir); ok {
			v := round(float64(total) / (1 << 20))
			per := round(v / float64(rep.OK))
			rep.CgroupMiB, rep.CgroupMiBPerSandbox = &v, &per
		}
		var each []int64
		if ents, err := os.ReadDir(memDir); err == nil {
			for _, e := range ents {
				if b, ok := cgroupMemory(filepath.Join(memDir, e.Name())); e.IsDir() && ok {
					each = append(each, b/1024)
				}
			}
		}
		rep.CgroupSandboxKiB = kibStat(each)
	}
	if n, ok := cgroupTasks(o.SandboxCgroup); ok {
		rep.Tasks = &n
	}
	if list, err := c.List(ctx, "", nil); err == nil {
		for _, sb := range list {
			if strings.HasPrefix(sb.Name, prefix) && sb.State == api.StateRunning {
				rep.Running++
			}
		}
	}
	if o.DaemonPid > 0 {
		rep.DaemonRSSIdleMiB, rep.DaemonFDsIdle = processRSSMiB(o.DaemonPid), processFDs(o.DaemonPid)
	}

	// A random sample still answers.
	mu.Lock()
	sample := append([]string(nil), okNames...)
	mu.Unlock()
	rand.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(o.IdleSample, len(sample))]
	rep.ExecSample = len(sample)
	var execs []time.Duration
	for _, name := range sample {
		t := time.Now()
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}})
		d := time.Since(t)
		if err != nil || res.ExitCode != 0 {
			if len(rep.Errors) < 10 {
				rep.Errors = append(rep.Errors, fmt.Sprintf("exec in %s: %+v %v", name, res, err))
			}
			continue
		}
		execs = append(execs, d)
	}
	rep.ExecOK = len(execs)
	rep.Exec = summarize(execs)
	return nil
}

// memoryCgroup is the memory controller's dir for a --sandbox-cgroup
// given as cgroup v2's unified dir or v1's cpu or cpuacct dir.
func memoryCgroup(dir string) string {
	if dir == "" {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.current")); err == nil {
		return dir
	}
	for _, ctl := range []string{"/cpuacct/", "/cpu,cpuacct/", "/cpu/"} {
		if i := strings.Index(dir, ctl); i >= 0 {
			m := dir[:i] + "/memory/" + dir[i+len(ctl):]
			if _, err := os.Stat(filepath.Join(m, "memory.usage_in_bytes")); err == nil {
				return m
			}
		}
	}
	return ""
}

// cgroupMemory is a memory cgroup's usage with its children: v2's
// memory.current or v1's memory.usage_in_bytes.
func cgroupMemory(dir string) (int64, bool) {
	for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// cgroupTasks counts the tasks (threads) below a cgroup dir: v2's and
// v1's pids controller keep pids.current.
func cgroupTasks(dir string) (int, bool) {
	if dir == "" {
		return 0, false
	}
	cands := []string{dir}
	for _, ctl := range []string{"/cpuacct/", "/cpu,cpuacct/", "/cpu/"} {
		if i := strings.Index(dir, ctl); i >= 0 {
			cands = append(cands, dir[:i]+"/pids/"+dir[i+len(ctl):])
		}
	}
	for _, d := range cands {
		if b, err := os.ReadFile(filepath.Join(d, "pids.current")); err == nil {
			v, err := strconv.Atoi(strings.TrimSpace(string(b)))
			return v, err == nil
		}
	}
	return 0, false
}

func processRSSMiB(pid int) *float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				if kib, err := strconv.ParseFloat(f[0], 64); err == nil {
					m := round(kib / 1024)
					return &m
				}
			}
		}
	}
	return nil
}

func processFDs(pid int) *int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return nil
	}
	n := len(ents)
	return &n
}

func printIdle(out io.Writer, asJSON bool, r *IdleReport) {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
		return
	}
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatFloat(*p, 'f', 2, 64)
	}
	fmt.Fprintf(out, "idle scenario: %d of %d %s sandboxes of %s created, %d at a time\n", r.OK, r.N, r.Instance, r.Image, r.Parallel)
	if r.Stopped != "" {
		fmt.Fprintf(out, "  stopped early: %s\n", r.Stopped)
	}
	codes := make([]string, 0, len(r.Status))
	for k := range r.Status {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	fmt.Fprintf(out, "  answers:")
	for _, k := range codes {
		fmt.Fprintf(out, " %s×%d", k, r.Status[k])
	}
	fmt.Fprintf(out, " (429s retried: %d)\n", r.Retries)
	if r.Create != nil {
		fmt.Fprintf(out, "  create: p50 %.1f ms, p99 %.1f, max %.1f; all in %.1f s (%.1f/s)\n", r.Create.P50, r.Create.P99, r.Create.Max, r.CreateWallMs/1000, r.CreatesPerS)
	}
	if r.CreateFirst != nil && r.CreateLast != nil {
		fmt.Fprintf(out, "  create p50, first tenth %.1f ms, last tenth %.1f ms\n", r.CreateFirst.P50, r.CreateLast.P50)
	}
	fmt.Fprintf(out, "  running while idle: %d\n", r.Running)
	fmt.Fprintf(out, "  host memory: MemAvailable %.0f → %.0f MiB, %s MiB per sandbox\n", r.MemAvailableBeforeMiB, r.MemAvailableIdleMiB, f(r.HostMiBPerSandbox))
	if r.CgroupMiB != nil {
		fmt.Fprintf(out, "  sandboxes' cgroups: %s MiB, %s MiB per sandbox", f(r.CgroupMiB), f(r.CgroupMiBPerSandbox))
		if s := r.CgroupSandboxKiB; s != nil {
			fmt.Fprintf(out, " (each: p50 %d KiB, max %d, n %d)", s.P50, s.Max, s.N)
		}
		fmt.Fprintln(out)
	}
	if r.Tasks != nil {
		fmt.Fprintf(out, "  tasks in the sandboxes: %d\n", *r.Tasks)
	}
	if r.DaemonRSSIdleMiB != nil {
		fd := func(p *int) int {
			if p == nil {
				return -1
			}
			return *p
		}
		fmt.Fprintf(out, "  daemon: RSS %s → %s MiB, open files %d → %d\n", f(r.DaemonRSSBeforeMiB), f(r.DaemonRSSIdleMiB), fd(r.DaemonFDsBefore), fd(r.DaemonFDsIdle))
	}
	fmt.Fprintf(out, "  CPU while idle (%.0f s, %% of one core): host %s, daemon %s, sandboxes %s\n", r.IdleWindowS, f(r.HostCPUPct), f(r.DaemonCPUPct), f(r.SandboxesCPUPct))
	if r.Exec != nil {
		fmt.Fprintf(out, "  exec `true` in %d random ones: %d ok, p50 %.1f ms, max %.1f\n", r.ExecSample, r.ExecOK, r.Exec.P50, r.Exec.Max)
	} else {
		fmt.Fprintf(out, "  exec `true` in %d random ones: %d ok\n", r.ExecSample, r.ExecOK)
	}
	fmt.Fprintf(out, "  destroy: all in %.1f s, %d failed, %d still listed\n", r.DestroyWallMs/1000, r.DestroyFailed, r.Left)
	for _, e := range r.Errors {
		fmt.Fprintf(out, "  error: %s\n", e)
	}
}

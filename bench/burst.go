package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// BurstReport is the burst scenario: N sandboxes asked for at once, then
// held running and idle while their footprint is measured.
type BurstReport struct {
	N      int      `json:"n"`
	OK     int      `json:"ok"`
	Errors []string `json:"errors,omitempty"` // the first few
	// TTI is each sandbox's create → `node -v` exits 0, all started at
	// the same instant; Create and FirstExec are its two parts (the
	// create's answer, then the first exec).
	TTI       *Stat   `json:"tti_ms"`
	Create    *Stat   `json:"create_ms"`
	FirstExec *Stat   `json:"first_exec_ms"`
	WallMs    float64 `json:"wall_ms"` // until the last one answered
	// Status counts the creates' answers by HTTP status ("201", "429",
	// "503", ...; a transport failure counts as its errdefs kind's
	// status). RetryAfterMissing counts 429s without Retry-After.
	Status            map[string]int `json:"status"`
	RetryAfterMissing int            `json:"retry_after_missing"`
	// RetryAfterS summarizes the Retry-After values (seconds) of the 429s.
	RetryAfterS *Stat `json:"retry_after_s,omitempty"`
	// HalfMade names sandboxes left in a state no answer accounts for,
	// read right after every create answered: one whose create succeeded
	// but that is not running, or one that exists though its create was
	// refused (none is the target).
	HalfMade []string `json:"half_made"`
	// CPU is the CPU time per sandbox of the burst (create and first
	// node -v), and CPUs the host's: N × CPU / CPUs is the wall time the
	// burst cannot beat.
	CPU  *CPUPer `json:"cpu_ms,omitempty"`
	CPUs int     `json:"cpus"`
	// AgentRSSKiB is the resident memory of each sandbox's agent (its
	// PID 1), read from inside the sandbox while all N run idle, and
	// AgentPrivateKiB the part of it that is its own (RssAnon): the rest
	// is the agent binary's pages, one copy shared by every sandbox.
	AgentRSSKiB     *KiBStat `json:"agent_rss_kib"`
	AgentPrivateKiB *KiBStat `json:"agent_private_kib"`
	// HostMiBPerSandbox is the drop in the host's MemAvailable while all
	// N run idle, divided by N (page cache and kernel objects included).
	HostMiBPerSandbox *float64 `json:"host_mib_per_sandbox,omitempty"`
}

// KiBStat is a size summary in KiB.
type KiBStat struct {
	P50 int64 `json:"p50"`
	Max int64 `json:"max"`
	N   int   `json:"n"`
}

// burstScenario creates n sandboxes at once, measures them, and destroys
// them (also on failure).
func burstScenario(ctx context.Context, c *client.Client, o Options, run string, n int, logf func(string, ...any)) (*BurstReport, error) {
	logf("burst: %d sandboxes at once", n)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%s-burst-%d", run, i)
	}
	defer func() {
		logf("burst: destroying %d sandboxes", n)
		forEach(names, 8, func(name string) { _ = c.Destroy(context.WithoutCancel(ctx), name) })
	}()
	memBefore := memAvailableKiB()
	rep := &BurstReport{N: n}
	rep.Status = map[string]int{}
	var mu sync.Mutex
	var tti, creates, execs, retry []time.Duration
	okNames := make([]string, 0, n)
	created := map[string]bool{}
	var allAnswered sync.WaitGroup // every create answered: look for half-made ones
	allAnswered.Add(n)
	checked := make(chan struct{})
	cpu0, cpuOK := readCPU(o.DaemonPid, o.SandboxCgroup)
	t0 := time.Now()
	forEach(names, n, func(name string) {
		start := time.Now()
		_, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Isolation: o.Isolation})
		dc := time.Since(start)
		mu.Lock()
		code := http.StatusCreated
		if err != nil {
			code = api.HTTPStatus(err)
			if code == http.StatusTooManyRequests {
				if d, ok := errdefs.RetryAfter(err); ok {
					retry = append(retry, d)
				} else {
					rep.RetryAfterMissing++
				}
			}
		} else {
			created[name] = true
		}
		rep.Status[strconv.Itoa(code)]++
		mu.Unlock()
		allAnswered.Done()
		if err != nil {
			if code != http.StatusTooManyRequests { // refusals are counted, not errors
				mu.Lock()
				if len(rep.Errors) < 5 {
					rep.Errors = append(rep.Errors, name+": "+err.Error())
				}
				mu.Unlock()
			}
			return
		}
		// The first exec waits until the half-made check has read the
		// list: it must see the state the creates left. (forEach runs
		// all n at once, so every create answers while some wait here.)
		// TTI is the create plus the exec, without this wait.
		<-checked
		t1 := time.Now()
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"node", "-v"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("node -v exited %d: %s", res.ExitCode, res.Stderr)
		}
		de := time.Since(t1)
		d := dc + de
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if len(rep.Errors) < 5 {
				rep.Errors = append(rep.Errors, name+": "+err.Error())
			}
			return
		}
		tti, creates, execs = append(tti, d), append(creates, dc), append(execs, de)
		okNames = append(okNames, name)
	}, func() {
		allAnswered.Wait()
		defer close(checked)
		list, err := c.List(ctx, "", nil)
		if err != nil {
			mu.Lock()
			rep.Errors = append(rep.Errors, "list after the burst: "+err.Error())
			mu.Unlock()
			return
		}
		prefix := fmt.Sprintf("bench-%s-burst-", run)
		mu.Lock()
		defer mu.Unlock()
		for _, sb := range list {
			if !strings.HasPrefix(sb.Name, prefix) {
				continue
			}
			if !created[sb.Name] || sb.State != api.StateRunning {
				rep.HalfMade = append(rep.HalfMade, sb.Name+" ("+sb.State+")")
			}
		}
		sort.Strings(rep.HalfMade)
	})
	rep.WallMs = round(float64(time.Since(t0).Microseconds()) / 1000)
	rep.OK = len(okNames)
	rep.TTI, rep.Create, rep.FirstExec = summarize(tti), summarize(creates), summarize(execs)
	if len(retry) > 0 {
		rep.RetryAfterS = summarizeSeconds(retry)
	}
	if rep.HalfMade == nil {
		rep.HalfMade = []string{}
	}
	rep.CPUs = runtime.NumCPU()
	if cpu1, ok := readCPU(o.DaemonPid, o.SandboxCgroup); ok && cpuOK {
		rep.CPU = cpuPer(cpu0, cpu1, n)
	}

	// Footprint while all of them run idle.
	logf("burst: measuring %d idle sandboxes", len(okNames))
	var rss, anon []int64
	forEach(okNames, 8, func(name string) {
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"grep", "-E", "^(VmRSS|RssAnon):", "/proc/1/status"}})
		if err != nil || res.ExitCode != 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(res.Stdout, "\n") {
			f := strings.Fields(line) // VmRSS: 1234 kB
			if len(f) < 2 {
				continue
			}
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				continue
			}
			switch f[0] {
			case "VmRSS:":
				rss = append(rss, v)
			case "RssAnon:":
				anon = append(anon, v)
			}
		}
	})
	rep.AgentRSSKiB, rep.AgentPrivateKiB = kibStat(rss), kibStat(anon)
	if memBefore > 0 && rep.OK > 0 {
		if after := memAvailableKiB(); after > 0 {
			v := round(float64(memBefore-after) / 1024 / float64(rep.OK))
			rep.HostMiBPerSandbox = &v
		}
	}
	return rep, nil
}

func kibStat(v []int64) *KiBStat {
	if len(v) == 0 {
		return nil
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return &KiBStat{P50: v[(len(v)-1)/2], Max: v[len(v)-1], N: len(v)}
}

// forEach runs fn over items with at most par at a time, and also
// alongside each of also.
func forEach(items []string, par int, fn func(string), also ...func()) {
	if par < 1 {
		par = 1
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, f := range also {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	for _, it := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func(it string) {
			defer wg.Done()
			defer func() { <-sem }()
			fn(it)
		}(it)
	}
	wg.Wait()
}

// memAvailableKiB reads MemAvailable from /proc/meminfo (0 if unknown;
// bench runs on the daemon's host).
func memAvailableKiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			return v
		}
	}
	return 0
}

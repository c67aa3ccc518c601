package e2b

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
)

func listManaged() control.ListFilter {
	return control.ListFilter{Labels: map[string]string{labelManaged: "1"}}
}

// Run enforces lifetimes until ctx ends: a running E2B sandbox past its
// end is killed, or paused when it was created with autoPause
// (lifecycle.onTimeout "pause"). A paused sandbox has no lifetime.
func (h *Handler) Run(ctx context.Context, tick time.Duration) {
	if tick <= 0 {
		tick = time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.expire(ctx)
		}
	}
}

func (h *Handler) expire(ctx context.Context) {
	sbs, err := h.b.List(ctx, listManaged())
	if err != nil {
		h.opts.Logf("e2b lifetimes: list: %v", err)
		return
	}
	now := time.Now()
	for _, sb := range sbs {
		if h.opts.Node != "" && sb.Node != h.opts.Node {
			continue // its owner's loop ends it
		}
		if sb.State == api.StateSleeping || sb.Labels[labelEnd] == "" || endOf(sb).After(now) {
			continue
		}
		if sb.Labels[labelOnTimeout] == "pause" {
			// As pause: a freeze keeps the process table, a stop drops it.
			h.cancelStreams(sb.Name, errSandboxGone)
			err := h.b.Sleep(ctx, sb.Name)
			if err != nil {
				h.opts.Logf("e2b lifetimes: pause %s: %v", sb.Name, err)
			}
			if after, lerr := h.lookup(ctx, sb.Name); err != nil || lerr != nil || after.SleepTier != api.SleepFreeze {
				h.forgetRun(sb.Name)
			}
			continue
		}
		h.endStreams(sb.Name, errSandboxGone)
		if err := h.b.Destroy(ctx, sb.Name); err != nil {
			h.opts.Logf("e2b lifetimes: kill %s: %v", sb.Name, err)
		}
	}
}

// metricBody is one SandboxMetric.
type metricBody struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// Bounds of the metric samples kept per sandbox (metricHistory).
const (
	maxMetricSamples   = 120
	maxMetricAge       = time.Hour
	maxMetricSandboxes = 4096
)

// metricHistory keeps the samples that getMetrics calls took, so a later
// call's [start, end] window finds them. berth samples only on request
// (E2B's API samples every few seconds): a window holds the samples
// taken in it, and "now" when it reaches the present.
type metricHistory struct {
	mu sync.Mutex
	m  map[string][]metricBody // sandbox → samples, oldest first
}

func (mh *metricHistory) add(id string, s metricBody) {
	mh.mu.Lock()
	defer mh.mu.Unlock()
	if mh.m == nil {
		mh.m = map[string][]metricBody{}
	}
	if _, ok := mh.m[id]; !ok && len(mh.m) >= maxMetricSandboxes {
		for k := range mh.m { // drop any one: these are only samples
			delete(mh.m, k)
			break
		}
	}
	list := append(mh.m[id], s)
	cut := 0
	for cut < len(list) && (len(list)-cut > maxMetricSamples || s.Timestamp.Sub(list[cut].Timestamp) > maxMetricAge) {
		cut++
	}
	mh.m[id] = append([]metricBody(nil), list[cut:]...)
}

// window returns the samples whose unix second lies in [start, end].
func (mh *metricHistory) window(id string, start, end int64) []metricBody {
	mh.mu.Lock()
	defer mh.mu.Unlock()
	out := []metricBody{}
	for _, s := range mh.m[id] {
		if s.TimestampUnix >= start && s.TimestampUnix <= end {
			out = append(out, s)
		}
	}
	return out
}

func (mh *metricHistory) forget(id string) {
	mh.mu.Lock()
	defer mh.mu.Unlock()
	delete(mh.m, id)
}

// metricBound parses the start or end query parameter: unix seconds.
func metricBound(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errdefs.InvalidArgument("%s %q must be a unix time in seconds", name, v)
	}
	return n, nil
}

// metrics answers the samples in the window [start, end] (unix seconds;
// by default all kept samples up to now), as E2B's API filters them. When
// the window reaches the present and the sandbox runs, a sample is taken
// now: the sandbox's memory (its cgroup's, else the sum of its processes'
// RSS) and its root filesystem's use, read inside it. cpuUsedPct is not
// measured. A paused sandbox takes no samples.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, id string) error {
	start, err := metricBound(r, "start", 0)
	if err != nil {
		return err
	}
	end, err := metricBound(r, "end", math.MaxInt64)
	if err != nil {
		return err
	}
	sb, err := h.lookup(r.Context(), id)
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			h.metricHist.forget(id)
		}
		return err
	}
	if h.opts.Metrics != nil {
		writeJSON(w, http.StatusOK, hostMetrics(h.opts.Metrics, id, h.detail(sb, false).CPUCount, start, end))
		return nil
	}
	now := time.Now().UTC()
	if sb.State == api.StateRunning && start <= now.Unix() && end >= now.Unix() {
		m := metricBody{Timestamp: now, CPUCount: h.detail(sb, false).CPUCount, MemTotal: sb.Resources.MemoryMiB << 20}
		m.TimestampUnix = m.Timestamp.Unix()
		if ag, release, err := h.b.Agent(r.Context(), id); err == nil {
			var stdout bytes.Buffer
			_, err := ag.Exec(r.Context(), api.ExecRequest{
				Command:   "cat /sys/fs/cgroup/memory.current 2>/dev/null || ps -eo rss= | awk '{s+=$1} END {print s*1024}'; df -B1 --output=used,size / 2>/dev/null | tail -n 1",
				User:      "root",
				TimeoutMs: 5000,
			}, &stdout, nil)
			release()
			if err == nil {
				f := strings.Fields(stdout.String())
				if len(f) >= 1 {
					m.MemUsed, _ = strconv.ParseInt(f[0], 10, 64)
				}
				if len(f) >= 3 {
					m.DiskUsed, _ = strconv.ParseInt(f[1], 10, 64)
					m.DiskTotal, _ = strconv.ParseInt(f[2], 10, 64)
				}
			}
		}
		h.metricHist.add(id, m)
	}
	writeJSON(w, http.StatusOK, h.metricHist.window(id, start, end))
	return nil
}

// hostMetrics is E2B's SandboxMetric list from the host's usage samples
// in [start, end] (unix seconds): CPU percent of the sandbox's cores
// (E2B's cpuUsedPct is of all its vCPUs, 0-100), memory and disk against
// their limits.
func hostMetrics(get func(string) (api.SandboxMetrics, bool), id string, cpus int, start, end int64) []metricBody {
	out := []metricBody{}
	m, _ := get(id)
	for _, s := range m.History {
		if u := s.Time.Unix(); u < start || u > end {
			continue
		}
		pct := s.CPUPercent
		if cpus > 0 {
			pct /= float64(cpus)
		}
		out = append(out, metricBody{
			Timestamp: s.Time, TimestampUnix: s.Time.Unix(), CPUCount: cpus,
			CPUUsedPct: math.Round(pct*100) / 100,
			MemUsed:    s.MemoryBytes, MemTotal: s.MemoryLimitBytes,
			DiskUsed: s.DiskUsedBytes, DiskTotal: s.DiskQuotaBytes,
		})
	}
	return out
}

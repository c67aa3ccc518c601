package e2b

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/server"
)

func listManaged() server.ListFilter {
	return server.ListFilter{Labels: map[string]string{labelManaged: "1"}}
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
		if sb.State == api.StateSleeping || sb.Labels[labelEnd] == "" || endOf(sb).After(now) {
			continue
		}
		h.endStreams(sb.Name, errSandboxGone)
		if sb.Labels[labelOnTimeout] == "pause" {
			if err := h.b.Sleep(ctx, sb.Name); err != nil {
				h.opts.Logf("e2b lifetimes: pause %s: %v", sb.Name, err)
			}
			continue
		}
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

// metrics answers one sample taken now (berth keeps no metric history): the
// sandbox's memory (its cgroup's, else the sum of its processes' RSS)
// and its root filesystem's use, read inside it. cpuUsedPct is not measured.
// A paused sandbox has no samples.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, id string) error {
	sb, err := h.lookup(r.Context(), id)
	if err != nil {
		return err
	}
	out := []metricBody{}
	if sb.State == api.StateRunning {
		m := metricBody{Timestamp: time.Now().UTC(), CPUCount: h.detail(sb, false).CPUCount, MemTotal: sb.Resources.MemoryMiB << 20}
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
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

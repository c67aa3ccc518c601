package metering

import (
	"context"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
)

// Defaults for Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultWindow   = 15 * time.Minute
	// activeCPU is the CPU time an interval must use to count as busy
	// (api.UsageSample.ActiveCPUSeconds).
	activeCPU = time.Millisecond
)

// Target is one running sandbox to sample.
type Target struct {
	Name, Tenant string
	// ID names its cgroup, veth and writable layer; RunID its current
	// run (a new run starts its counters from zero).
	ID, RunID string
	StartedAt time.Time
	CPUs      float64
	// MemoryLimit and DiskQuota are its limits in bytes (0: none known).
	MemoryLimit, DiskQuota int64
	// Traffic: its network traffic counts as activity for idle sleep
	// (api.LabelTrafficActivity).
	Traffic bool
}

// Raw is what a Reader read of one sandbox: cumulative counters of its
// run and levels now. NetTx is what the sandbox sent, NetRx what it got.
type Raw struct {
	CPU                time.Duration
	Memory, MemoryPeak int64
	DiskUsed           int64
	NetTx, NetRx       int64
}

// Source lists the running sandboxes of this node.
type Source interface {
	Running() []Target
}

// Reader reads one sandbox's counters on the host.
type Reader interface {
	Read(t Target) (Raw, error)
}

// Config wires a Sampler.
type Config struct {
	Source Source
	Reader Reader
	// Store keeps the tenants' usage records; nil: none are kept.
	Store store.Objects
	// Node is this node's name in the records' keys ("local" if empty).
	Node string
	// Interval between samples (default 5 s) and Window of history kept
	// (default 15 min).
	Interval, Window time.Duration
	// Active is called with the name of a Traffic sandbox whose network
	// carried bytes since the last sample; nil: nobody is told.
	Active func(name string)
	// Observe receives the duration of each sampling round; nil: none.
	Observe func(time.Duration)
	Logf    func(format string, args ...any)
}

// Sampler samples the running sandboxes and keeps their history and the
// tenants' usage records. Its methods are safe for concurrent use.
type Sampler struct {
	cfg     Config
	started time.Time
	mu      sync.Mutex
	sbs     map[string]*sbState // by name
	led     *ledger
	// errs remembers which sandboxes' reads failed, to log once a run.
	errs map[string]bool
}

type sbState struct {
	runID  string
	ring   *ring
	prev   Raw
	prevT  time.Time
	active time.Duration
}

// New returns a Sampler; Run samples until its context ends.
func New(cfg Config) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Node == "" {
		cfg.Node = "local"
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Sampler{cfg: cfg, started: time.Now(), sbs: map[string]*sbState{}, errs: map[string]bool{},
		led: newLedger(cfg.Store, cfg.Node)}
}

// Interval is the time between samples.
func (s *Sampler) Interval() time.Duration { return s.cfg.Interval }

// Run samples every Interval until ctx ends, then writes the records
// that changed one last time.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.led.flush(fctx, s.cfg.Logf)
			cancel()
			return
		case now := <-t.C:
			s.SampleOnce(ctx, now)
		}
	}
}

// SampleOnce takes one round of samples at now (Run calls it; tests may).
func (s *Sampler) SampleOnce(ctx context.Context, now time.Time) {
	t0 := time.Now()
	targets := s.cfg.Source.Running()
	seen := make(map[string]bool, len(targets))
	var active []string
	for _, t := range targets {
		raw, err := s.cfg.Reader.Read(t)
		seen[t.Name] = true
		if err != nil {
			s.mu.Lock()
			if !s.errs[t.Name+"\x00"+t.RunID] {
				s.errs[t.Name+"\x00"+t.RunID] = true
				s.cfg.Logf("metering: sandbox %s: %v", t.Name, err)
			}
			s.mu.Unlock()
			continue
		}
		if s.add(ctx, t, raw, now) {
			active = append(active, t.Name)
		}
	}
	s.mu.Lock()
	for name := range s.sbs {
		if !seen[name] {
			delete(s.sbs, name)
		}
	}
	for k := range s.errs {
		if name, _, _ := cut0(k); !seen[name] {
			delete(s.errs, k)
		}
	}
	s.mu.Unlock()
	s.led.flush(ctx, s.cfg.Logf)
	if s.cfg.Active != nil {
		for _, n := range active {
			s.cfg.Active(n)
		}
	}
	if s.cfg.Observe != nil {
		s.cfg.Observe(time.Since(t0))
	}
}

func cut0(k string) (string, string, bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == 0 {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}

// delta is cur-prev of a counter, or cur when it went backwards (the
// counter restarted).
func delta(cur, prev int64) int64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// add records one sample of t; it reports whether t's network carried
// bytes (and t counts traffic as activity).
func (s *Sampler) add(ctx context.Context, t Target, raw Raw, now time.Time) bool {
	s.mu.Lock()
	st := s.sbs[t.Name]
	if st == nil || st.runID != t.RunID {
		n := int(s.cfg.Window / s.cfg.Interval)
		st = &sbState{runID: t.RunID, ring: newRing(max(n, 1))}
		s.sbs[t.Name] = st
		if t.StartedAt.Before(s.started) {
			// Adopted across a daemon restart: what it used before
			// was accounted by the previous daemon; start from now.
			st.prev, st.prevT = raw, now
		} else {
			st.prevT = t.StartedAt // a run this sampler saw begin: count all of it
		}
	}
	wall := now.Sub(st.prevT)
	if wall <= 0 {
		wall = s.cfg.Interval
	}
	dCPU := time.Duration(delta(int64(raw.CPU), int64(st.prev.CPU)))
	dTx, dRx := delta(raw.NetTx, st.prev.NetTx), delta(raw.NetRx, st.prev.NetRx)
	busy := time.Duration(0)
	if dCPU >= activeCPU {
		busy = min(wall, s.cfg.Interval+s.cfg.Interval/2) // a late first sample must not bill its whole wait
		st.active += busy
	}
	smp := api.UsageSample{
		Time:             now.UTC(),
		CPUSeconds:       raw.CPU.Seconds(),
		CPUPercent:       100 * dCPU.Seconds() / wall.Seconds(),
		ActiveCPUSeconds: st.active.Seconds(),
		CPUCount:         t.CPUs,
		MemoryBytes:      raw.Memory,
		MemoryPeakBytes:  raw.MemoryPeak,
		MemoryLimitBytes: t.MemoryLimit,
		DiskUsedBytes:    raw.DiskUsed,
		DiskQuotaBytes:   t.DiskQuota,
		NetTxBytes:       raw.NetTx,
		NetRxBytes:       raw.NetRx,
	}
	st.ring.add(smp)
	st.prev, st.prevT = raw, now
	s.mu.Unlock()
	sec := wall.Seconds()
	const gib = 1 << 30
	s.led.add(ctx, t.Tenant, now, api.UsageRecord{
		CPUSeconds:        dCPU.Seconds(),
		ActiveCPUSeconds:  busy.Seconds(),
		MemoryGiBSeconds:  float64(raw.Memory) / gib * sec,
		StorageGiBSeconds: float64(raw.DiskUsed) / gib * sec,
		EgressBytes:       dTx,
		IngressBytes:      dRx,
	}, s.cfg.Logf)
	return t.Traffic && (dTx > 0 || dRx > 0)
}

// Metrics returns name's latest sample and history; ok is false when
// name is not running here (or has no sample yet).
func (s *Sampler) Metrics(name string) (api.SandboxMetrics, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := api.SandboxMetrics{Name: name, IntervalMs: s.cfg.Interval.Milliseconds(), History: []api.UsageSample{}}
	st := s.sbs[name]
	if st == nil {
		return out, false
	}
	out.History = st.ring.all()
	if cur, ok := st.ring.last(); ok {
		out.Current = &cur
	}
	return out, out.Current != nil
}

// Usage returns tenant's records in [from, to) (from the store: every
// node's), with their total.
func (s *Sampler) Usage(ctx context.Context, tenant string, from, to time.Time) (api.UsageReport, error) {
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	s.led.flush(fctx, s.cfg.Logf) // what this node counted so far is in the answer
	cancel()
	recs, err := s.led.list(ctx, tenant, from, to)
	if err != nil {
		return api.UsageReport{}, err
	}
	rep := api.UsageReport{From: from.UTC(), To: to.UTC(), Records: recs, Totals: []api.UsageRecord{}}
	if len(recs) > 0 {
		tot := api.UsageRecord{Tenant: tenant, Start: recs[0].Start}
		for _, r := range recs {
			tot = sum(tot, r)
		}
		rep.Totals = append(rep.Totals, tot)
	}
	return rep, nil
}

func sum(a, b api.UsageRecord) api.UsageRecord {
	a.CPUSeconds += b.CPUSeconds
	a.ActiveCPUSeconds += b.ActiveCPUSeconds
	a.MemoryGiBSeconds += b.MemoryGiBSeconds
	a.StorageGiBSeconds += b.StorageGiBSeconds
	a.EgressBytes += b.EgressBytes
	a.IngressBytes += b.IngressBytes
	return a
}

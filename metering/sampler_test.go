package metering_test

import (
	"context"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/metering"
	"github.com/berth-sh/berth/store/sqlite"
)

type fakeSource struct {
	mu      sync.Mutex
	targets []metering.Target
}

func (f *fakeSource) Running() []metering.Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metering.Target(nil), f.targets...)
}

type fakeReader struct {
	mu  sync.Mutex
	raw map[string]metering.Raw
}

func (f *fakeReader) Read(t metering.Target) (metering.Raw, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.raw[t.Name], nil
}

func (f *fakeReader) set(name string, r metering.Raw) {
	f.mu.Lock()
	f.raw[name] = r
	f.mu.Unlock()
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestSamplerHistoryAndUsage(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Now().Add(time.Second) // runs this sampler saw begin
	src := &fakeSource{targets: []metering.Target{
		{Name: "busy", Tenant: "acme", ID: "a", RunID: "r1", StartedAt: start, CPUs: 2},
		{Name: "idle", Tenant: "acme", ID: "b", RunID: "r1", StartedAt: start, CPUs: 1, Traffic: true},
	}}
	rd := &fakeReader{raw: map[string]metering.Raw{}}
	var activeMu sync.Mutex
	active := map[string]int{}
	cfg := metering.Config{Source: src, Reader: rd, Store: st, Node: "n1", Interval: 5 * time.Second, Window: 30 * time.Second,
		Active: func(n string) { activeMu.Lock(); active[n]++; activeMu.Unlock() }}
	s := metering.New(cfg)
	// 12 rounds, 5 s apart: busy burns one core (5 s CPU per round) and
	// holds 1 GiB; idle uses nothing and sends nothing.
	for i := 1; i <= 12; i++ {
		now := start.Add(time.Duration(i) * 5 * time.Second)
		rd.set("busy", metering.Raw{CPU: time.Duration(i) * 5 * time.Second, Memory: 1 << 30, MemoryPeak: 1 << 30, NetTx: int64(i) * 1000, NetRx: int64(i) * 10})
		rd.set("idle", metering.Raw{Memory: 1 << 20})
		s.SampleOnce(ctx, now)
	}
	m, ok := s.Metrics("busy")
	if !ok || m.Current == nil {
		t.Fatal("no metrics for busy")
	}
	if len(m.History) != 6 { // 30 s window / 5 s: the ring is bounded
		t.Errorf("history holds %d samples, want 6", len(m.History))
	}
	if !m.History[0].Time.Before(m.History[5].Time) {
		t.Error("history is not oldest first")
	}
	if m.Current.CPUSeconds != 60 || !near(m.Current.CPUPercent, 100, 0.01) || !near(m.Current.ActiveCPUSeconds, 60, 0.01) {
		t.Errorf("busy: cpu %v s, %v %%, active %v s; want 60, 100, 60", m.Current.CPUSeconds, m.Current.CPUPercent, m.Current.ActiveCPUSeconds)
	}
	if mi, _ := s.Metrics("idle"); mi.Current.CPUSeconds != 0 || mi.Current.ActiveCPUSeconds != 0 || mi.Current.CPUPercent != 0 {
		t.Errorf("idle: %+v", *mi.Current)
	}
	activeMu.Lock()
	if active["idle"] != 0 || active["busy"] != 0 {
		t.Errorf("activity without traffic (idle) or without the label (busy): %v", active)
	}
	activeMu.Unlock()

	rep, err := s.Usage(ctx, "acme", start.Add(-time.Hour), start.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Totals) != 1 {
		t.Fatalf("totals: %+v", rep)
	}
	tot := rep.Totals[0]
	// 60 s of one GiB (busy) + 60 s of one MiB (idle).
	if tot.CPUSeconds != 60 || !near(tot.MemoryGiBSeconds, 60+60.0/1024, 0.01) || tot.EgressBytes != 12000 || tot.IngressBytes != 120 {
		t.Errorf("usage total %+v", tot)
	}
	if other, _ := s.Usage(ctx, "other", start.Add(-time.Hour), start.Add(2*time.Hour)); len(other.Records) != 0 {
		t.Errorf("tenant other sees %+v", other.Records)
	}

	// A restarted daemon (a new sampler on the same store) adds to the
	// hour's record instead of starting it again; sandboxes it adopts
	// count from its first sample.
	s2 := metering.New(cfg)
	src.mu.Lock()
	src.targets = src.targets[:1]
	src.targets[0].StartedAt = start.Add(-time.Minute) // adopted
	src.mu.Unlock()
	base := start.Add(61 * time.Second)
	rd.set("busy", metering.Raw{CPU: 100 * time.Second, Memory: 1 << 30})
	s2.SampleOnce(ctx, base)
	rd.set("busy", metering.Raw{CPU: 105 * time.Second, Memory: 1 << 30})
	s2.SampleOnce(ctx, base.Add(5*time.Second))
	rep2, err := s2.Usage(ctx, "acme", start.Add(-time.Hour), start.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The first round only sets the baseline (its 40 s since the last
	// sample were the old daemon's to count); the second adds 5 s.
	if got := rep2.Totals[0].CPUSeconds; got != 65 {
		t.Errorf("after restart CPU seconds %v, want 65 (60 kept + 5 new)", got)
	}
	if _, ok := s2.Metrics("idle"); ok {
		t.Error("a sandbox no longer running keeps its history")
	}
}

func TestTrafficActivity(t *testing.T) {
	ctx := context.Background()
	start := time.Now().Add(time.Second)
	src := &fakeSource{targets: []metering.Target{
		{Name: "ws", RunID: "r", StartedAt: start, Traffic: true},
		{Name: "nolabel", RunID: "r", StartedAt: start},
	}}
	rd := &fakeReader{raw: map[string]metering.Raw{}}
	var mu sync.Mutex
	active := map[string]int{}
	s := metering.New(metering.Config{Source: src, Reader: rd, Active: func(n string) { mu.Lock(); active[n]++; mu.Unlock() }})
	for i := 1; i <= 4; i++ {
		rd.set("ws", metering.Raw{NetTx: int64(i) * 50, NetRx: int64(i) * 50})
		rd.set("nolabel", metering.Raw{NetTx: int64(i) * 50})
		s.SampleOnce(ctx, start.Add(time.Duration(i)*5*time.Second))
	}
	// Then the traffic stops: no more activity.
	s.SampleOnce(ctx, start.Add(25*time.Second))
	s.SampleOnce(ctx, start.Add(30*time.Second))
	mu.Lock()
	defer mu.Unlock()
	if active["ws"] != 4 {
		t.Errorf("ws active %d times, want 4 (one per round that carried bytes)", active["ws"])
	}
	if active["nolabel"] != 0 {
		t.Errorf("a sandbox without the label counted traffic as activity %d times", active["nolabel"])
	}
}

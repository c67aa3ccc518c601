package metering_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/berth-sh/berth/metering"
)

// TestHistoryMemoryPerSandbox measures the heap one sandbox's full
// history takes at the default window and interval (the figure in
// ARCHITECTURE.md "Metrics and metering"), and checks it stays bounded
// however long sampling runs.
func TestHistoryMemoryPerSandbox(t *testing.T) {
	const n = 500
	src := &fakeSource{}
	start := time.Now().Add(time.Second)
	for i := range n {
		src.targets = append(src.targets, metering.Target{Name: fmt.Sprintf("sb-%d", i), RunID: "r", StartedAt: start})
	}
	rd := &fakeReader{raw: map[string]metering.Raw{}}
	s := metering.New(metering.Config{Source: src, Reader: rd})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	ctx := context.Background()
	rounds := int(metering.DefaultWindow / metering.DefaultInterval)
	h0 := heap()
	for i := 1; i <= rounds; i++ {
		s.SampleOnce(ctx, start.Add(time.Duration(i)*metering.DefaultInterval))
	}
	full := heap()
	for i := rounds + 1; i <= 3*rounds; i++ {
		s.SampleOnce(ctx, start.Add(time.Duration(i)*metering.DefaultInterval))
	}
	later := heap()
	per := float64(full-h0) / n
	t.Logf("history of %d samples: %.1f KiB per sandbox (%d sandboxes)", rounds, per/1024, n)
	if per > 64<<10 {
		t.Errorf("%.0f bytes per sandbox", per)
	}
	if later > full+full/10 {
		t.Errorf("heap grew from %d to %d after the window filled", full, later)
	}
	runtime.KeepAlive(s)
}

package bench

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestForEachBoundsParallelism(t *testing.T) {
	items := make([]string, 40)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	var running, peak, done atomic.Int32
	forEach(items, 4, func(string) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		done.Add(1)
	})
	if done.Load() != 40 || peak.Load() > 4 {
		t.Fatalf("ran %d items with up to %d at once, want 40 with at most 4", done.Load(), peak.Load())
	}
}

func TestMemAvailable(t *testing.T) {
	if v := memAvailableKiB(); v <= 0 {
		t.Fatalf("MemAvailable from /proc/meminfo: %d", v)
	}
}

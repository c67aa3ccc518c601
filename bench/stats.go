package bench

import (
	"math"
	"sort"
	"time"
)

// Stat is a latency summary in milliseconds.
type Stat struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

// summarize computes percentiles with the nearest-rank method.
func summarize(d []time.Duration) *Stat {
	if len(d) == 0 {
		return nil
	}
	ms := make([]float64, len(d))
	for i, v := range d {
		ms[i] = float64(v.Microseconds()) / 1000
	}
	sort.Float64s(ms)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ms)))) - 1
		if i < 0 {
			i = 0
		}
		return round(ms[i])
	}
	return &Stat{P50: rank(0.50), P95: rank(0.95), P99: rank(0.99), Min: round(ms[0]), Max: round(ms[len(ms)-1]), N: len(ms)}
}

func round(v float64) float64 { return math.Round(v*100) / 100 }

// summarizeSeconds is summarize in seconds instead of milliseconds.
func summarizeSeconds(d []time.Duration) *Stat {
	scaled := make([]time.Duration, len(d))
	for i, v := range d {
		scaled[i] = v / 1000
	}
	return summarize(scaled)
}

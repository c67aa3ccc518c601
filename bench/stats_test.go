package bench

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	s := summarize(d)
	if s.P50 != 50 || s.P95 != 95 || s.Min != 1 || s.Max != 100 || s.N != 100 {
		t.Fatalf("got %+v", s)
	}
	if summarize(nil) != nil {
		t.Fatal("empty input must give nil")
	}
	if s := summarize([]time.Duration{3 * time.Millisecond}); s.P50 != 3 || s.P95 != 3 {
		t.Fatalf("single sample: %+v", s)
	}
}

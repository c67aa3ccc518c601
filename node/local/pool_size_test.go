package local

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestPoolTarget: an adaptive pool's target follows its demand — a burst
// of creates raises it by about the burst, a steady rate holds it at the
// rate over poolCover, idleness lowers it to min — within max and the
// memory budget's room; a fixed pool keeps its size, also capped by room.
func TestPoolTarget(t *testing.T) {
	spec := PoolSpec{Adaptive: true, Min: 2, Max: 100}
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var d demand
	if got := poolTarget(spec, d.perSecond(t0), -1); got != 2 {
		t.Fatalf("no demand: target %d, want min 2", got)
	}
	// 40 creates at once: the target rises to about 40.
	for i := 0; i < 40; i++ {
		d.add(t0)
	}
	if got := poolTarget(spec, d.perSecond(t0), -1); got != 40 {
		t.Fatalf("after 40 creates: target %d, want 40", got)
	}
	// Rate up: a steady 3 creates a second for five minutes holds about
	// 3 × poolCover/s = 180, capped at max.
	at := t0
	for i := 0; i < 900; i++ {
		at = at.Add(time.Second / 3)
		d.add(at)
	}
	if got := poolTarget(spec, d.perSecond(at), -1); got != 100 {
		t.Fatalf("at 3/s: target %d, want max 100", got)
	}
	if r := d.perSecond(at); r < 2.9 || r > 3.1 {
		t.Fatalf("steady 3/s reads %.2f/s", r)
	}
	// 0.5/s: about 30.
	for i := 0; i < 600; i++ {
		at = at.Add(2 * time.Second)
		d.add(at)
	}
	if got := poolTarget(spec, d.perSecond(at), -1); got < 29 || got > 32 {
		t.Fatalf("at 0.5/s: target %d, want about 30", got)
	}
	// The memory budget caps it.
	if got := poolTarget(spec, d.perSecond(at), 7); got != 7 {
		t.Fatalf("room 7: target %d", got)
	}
	// Idle: falls, and after ten minutes is back at min.
	mid := poolTarget(spec, d.perSecond(at.Add(time.Minute)), -1)
	if mid >= 29 || mid <= 2 {
		t.Fatalf("a minute idle: target %d, want between min and the busy 30", mid)
	}
	if got := poolTarget(spec, d.perSecond(at.Add(10*time.Minute)), -1); got != 2 {
		t.Fatalf("ten minutes idle: target %d, want min 2", got)
	}
	// Room below min: the budget wins.
	if got := poolTarget(spec, 0, 1); got != 1 {
		t.Fatalf("room 1 below min 2: target %d", got)
	}
	// A fixed pool keeps its size whatever the demand, within room.
	fixed := PoolSpec{Size: 8}
	if got := poolTarget(fixed, 50, -1); got != 8 {
		t.Fatalf("fixed: target %d", got)
	}
	if got := poolTarget(fixed, 0, 3); got != 3 {
		t.Fatalf("fixed with room 3: target %d", got)
	}
}

// TestPoolBudgetAndGrowth, through the refill loop: a memory budget of
// two members' worth holds a fixed pool of 4 at 2 (and the pool reports
// 2 as its size); an adaptive pool (min 1) that serves 3 creates grows to
// 3 ready members.
func TestPoolBudgetAndGrowth(t *testing.T) {
	r := newRig(t)
	r.cfg.PoolMemoryMiB = 2 * DefaultPoolMemberMiB
	r = poolRigFrom(t, r, PoolSpec{Image: "debian-trixie", Size: 4})
	p := waitPool(t, r.m, "2 ready", func(p api.Pool) bool { return p.Ready == 2 })
	time.Sleep(100 * time.Millisecond) // refill would have gone on by now
	if p = r.m.Pools()[0]; p.Ready != 2 || p.Starting != 0 || p.Size != 2 {
		t.Fatalf("budget of 2 members: %+v", p)
	}

	a := poolRig(t, PoolSpec{Image: "debian-trixie", Adaptive: true, Min: 1, Max: 10})
	waitPool(t, a.m, "1 ready", func(p api.Pool) bool { return p.Ready == 1 })
	for _, n := range []string{"g1", "g2", "g3"} {
		if _, _, err := plane(a.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: n}, false); err != nil {
			t.Fatal(err)
		}
	}
	p = waitPool(t, a.m, "3 ready after 3 creates", func(p api.Pool) bool { return p.Ready >= 3 })
	if p.Adaptive == nil || p.Adaptive.Min != 1 || p.Adaptive.Max != 10 || p.RatePerMin < 2.9 || p.Claims+p.Misses != 3 {
		t.Fatalf("adaptive pool after 3 creates: %+v", p)
	}
}

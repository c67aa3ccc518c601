package local

import (
	"math"
	"time"
)

// Adaptive pool size (issue 15). An adaptive pool (IMAGE=adaptive,max=N)
// sizes itself from its recent demand: the creates that matched it,
// claims and misses alike, counted as an exponentially decaying rate
// with time constant poolRateTau. It aims to hold the creates expected
// over poolCover at that rate, within [min, max]; every pool, fixed or
// adaptive, stays within the memory budget (--pool-memory), its members
// counted at PoolMemberMiB each. With poolCover equal to poolRateTau, N
// creates at once raise the target by about N; an idle pool's target
// falls by e every poolRateTau, to min within a few minutes.

const (
	// poolRateTau is the time constant of a pool's demand rate.
	poolRateTau = time.Minute
	// poolCover is how long an adaptive pool's members should last at
	// the recent rate without a refill.
	poolCover = time.Minute
	// DefaultPoolMemberMiB is what one idle member is counted at against
	// the memory budget: the host memory (MemAvailable drop) one idle
	// sandbox was measured to take here, 4.9 MiB (berth bench --burst
	// 100, 2026-12), rounded up.
	DefaultPoolMemberMiB = 5
	// poolResize is how often the refill loop looks again at an adaptive
	// pool whose target may have fallen.
	poolResize = 5 * time.Second
)

// demand is a decaying event rate: each event adds 1/tau, and the sum
// decays by e every tau, so a steady rate of r events per second reads r.
type demand struct {
	rate float64 // events per second, as of at
	at   time.Time
}

func (d *demand) decay(now time.Time) {
	if dt := now.Sub(d.at); dt > 0 {
		if !d.at.IsZero() {
			d.rate *= math.Exp(-dt.Seconds() / poolRateTau.Seconds())
		}
		d.at = now
	}
}

// add counts one event at now.
func (d *demand) add(now time.Time) {
	d.decay(now)
	d.rate += 1 / poolRateTau.Seconds()
}

// perSecond is the rate at now.
func (d *demand) perSecond(now time.Time) float64 {
	d.decay(now)
	return d.rate
}

// poolTarget is how many members a pool of spec should hold: a fixed
// pool its Size; an adaptive one the creates expected over poolCover at
// rate (per second), rounded up, at least Min and at most Max. Either
// way at most room, the members the memory budget leaves it (negative:
// no budget).
func poolTarget(s PoolSpec, rate float64, room int) int {
	n := s.Size
	if s.Adaptive {
		// A whisker below an integer is that integer (float decay).
		n = int(math.Ceil(rate*poolCover.Seconds() - 1e-6))
		n = min(max(n, s.Min), s.Max)
	}
	if room >= 0 {
		n = min(n, room)
	}
	return max(n, 0)
}

// budgetMembers is how many members the memory budget holds in all
// (negative: no budget).
func (m *Manager) budgetMembers() int {
	if m.cfg.PoolMemoryMiB <= 0 {
		return -1
	}
	per := m.cfg.PoolMemberMiB
	if per <= 0 {
		per = DefaultPoolMemberMiB
	}
	return int(m.cfg.PoolMemoryMiB / per)
}

// targetLocked is p's target at now, with the room the other pools'
// members leave in the budget. Callers hold ps.mu.
func (ps *pools) targetLocked(p *pool, now time.Time) int {
	room := ps.m.budgetMembers()
	if room >= 0 {
		for _, o := range ps.list {
			if o != p {
				room -= len(o.idle) + o.starting
			}
		}
		room = max(room, 0)
	}
	return poolTarget(p.spec, p.demand.perSecond(now), room)
}

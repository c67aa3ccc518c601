package local

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// The warm pool (issue 15): per (image, isolation[, instance type]) a
// fixed number of fully started, anonymous sandboxes — user namespace
// range, overlay, network namespace, container and agent up, posture
// verified — frozen in their cgroup so that they cost no CPU while they
// wait. A fresh create that matches claims one (pool_claim.go) and binds
// at that moment everything that makes it this sandbox; a member is
// never handed out twice, and a claimed sandbox is destroyed like any
// other: nothing of one claim reaches the next.
//
// Members are not in the state store. A daemon that dies leaves them as
// containers, mounts and netns that no record owns, and Reconcile removes
// them at the next start like any other leftover.

// PoolSpec configures one warm pool.
type PoolSpec struct {
	// Image is the image name or digest the members start from.
	Image string
	// Instance, if set, is the instance type a create must name to claim
	// (members start with its limits); "" serves every instance type,
	// members starting with DefaultInstance's limits and getting the
	// claim's at claim.
	Instance string
	// Isolation is api.IsolationRunc (the default; gVisor sandboxes are
	// not pooled: their hostname cannot be set from the host).
	Isolation string
	// Size is how many members a fixed pool keeps ready.
	Size int
	// Adaptive pools size themselves from their recent create rate
	// (pool_size.go), from Min to Max members.
	Adaptive bool
	Min, Max int
	// Snapshot, if set, starts the members from this snapshot (its
	// layers as read-only lowers over Image, which must be the image it
	// was taken on), and only a create that restores it claims one.
	Snapshot string
}

// ParsePoolSpec parses berth serve's --pool value:
//
//	IMAGE=SIZE[,instance=TYPE][,isolation=runc][,snapshot=ID]
//	IMAGE=adaptive,max=N[,min=N][,instance=TYPE][,isolation=runc][,snapshot=ID]
//
// e.g. "debian-trixie=4", "debian-trixie=8,instance=basic" or
// "debian-trixie=adaptive,min=2,max=100". IMAGE is a name or a digest (it
// may hold ':' and '/', never '=' or ',').
func ParsePoolSpec(s string) (PoolSpec, error) {
	parts := strings.Split(s, ",")
	img, size, ok := strings.Cut(parts[0], "=")
	if !ok || img == "" {
		return PoolSpec{}, errdefs.InvalidArgument("pool %q: want IMAGE=SIZE[,instance=TYPE][,isolation=runc] or IMAGE=adaptive,max=N[,min=N][,...]", s)
	}
	p := PoolSpec{Image: img, Isolation: api.IsolationRunc}
	count := func(what, v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxPoolSize {
			return 0, errdefs.InvalidArgument("pool %q: %s must be a number from 0 to %d", s, what, maxPoolSize)
		}
		return n, nil
	}
	if size == "adaptive" {
		p.Adaptive, p.Max = true, -1
	} else {
		n, err := count("size", size)
		if err != nil {
			return PoolSpec{}, err
		}
		p.Size = n
	}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "snapshot":
			if err := validSnapshotID(v); err != nil {
				return PoolSpec{}, errdefs.InvalidArgument("pool %q: snapshot: %v", s, err)
			}
			p.Snapshot = v
		case "min", "max":
			if !p.Adaptive {
				return PoolSpec{}, errdefs.InvalidArgument("pool %q: %s= is for an adaptive pool (IMAGE=adaptive,max=N)", s, k)
			}
			n, err := count(k, v)
			if err != nil {
				return PoolSpec{}, err
			}
			if k == "min" {
				p.Min = n
			} else {
				p.Max = n
			}
		case "instance":
			if _, _, err := resolveInstance(v, nil); err != nil || v == "" || v == "custom" {
				return PoolSpec{}, errdefs.InvalidArgument("pool %q: unknown instance type %q", s, v)
			}
			p.Instance = v
			if v == "standard" {
				p.Instance = "standard-1"
			}
		case "isolation":
			if v != api.IsolationRunc {
				return PoolSpec{}, errdefs.InvalidArgument("pool %q: only isolation %q is pooled", s, api.IsolationRunc)
			}
		default:
			return PoolSpec{}, errdefs.InvalidArgument("pool %q: unknown option %q (want instance=, isolation=, snapshot=, or min= and max= with adaptive)", s, k)
		}
	}
	if p.Adaptive {
		if p.Max < 0 {
			return PoolSpec{}, errdefs.InvalidArgument("pool %q: an adaptive pool needs max=N, its most members", s)
		}
		if p.Min > p.Max {
			return PoolSpec{}, errdefs.InvalidArgument("pool %q: min=%d is above max=%d", s, p.Min, p.Max)
		}
	}
	return p, nil
}

// refillQuiet is how long after the last claim a refill waits, so that
// a burst of claims does not share the CPU with member starts.
const refillQuiet = 20 * time.Millisecond

// maxPoolSize bounds one pool: each member holds a user namespace range,
// an address and some MiB of host memory.
const maxPoolSize = 1000

// PoolRuntime is the part of the runtime a pool needs beyond Runtime: a
// claim thaws, resizes and renames a running container without spawning
// the OCI runtime (runtime.Selector).
type PoolRuntime interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
	Resize(ctx context.Context, id string, milliCPU, memoryBytes, pids int64) error
	SetHostname(id, bundle, name string) error
}

// member is one started, frozen, unclaimed sandbox.
type member struct {
	id       string
	digest   string
	imgEnv   []string
	lowers   []string
	userns   IDRange
	att      Attachment
	internet bool // the raw internet switch its netns was set up with
	// snapshot and chain: the snapshot its rootfs stands on (its chain's
	// layers are lowers after the image's), "" for none.
	snapshot string
	chain    []store.Layer
	res      api.Resources
	agent    *agentclient.Client
	pool     *pool
}

// pool is one PoolSpec's members and counters.
type pool struct {
	spec PoolSpec
	// Guarded by pools.mu:
	digest   string
	idle     []*member
	starting int
	fails    int    // consecutive refill failures
	demand   demand // creates that matched it (claims and misses)
	lastErr  string
	retryAt  time.Time
	// counters (api.Pool)
	claims, misses, refills, failures, shrinks int64
}

// pools are this node's warm pools and their refill loop.
type pools struct {
	m    *Manager
	mu   sync.Mutex
	list []*pool
	uids map[uint32]bool // host id ranges members hold; guarded by mu
	// reserved are members taken for a start that has not bound them
	// yet (admit, claim); guarded by mu.
	reserved map[string]*member
	kick     chan struct{}
	// lastClaim is when a member was last taken (unix ns): refills wait
	// until claims have been quiet for refillQuiet.
	lastClaim atomic.Int64
	// backoff is the first retry delay after a failed refill; it doubles
	// with each failure in a row up to maxBackoff.
	backoff, maxBackoff time.Duration
	done                chan struct{}
}

func newPools(m *Manager, specs []PoolSpec) *pools {
	ps := &pools{m: m, uids: map[uint32]bool{}, reserved: map[string]*member{}, kick: make(chan struct{}, 1), done: make(chan struct{}),
		backoff: m.cfg.PoolBackoff, maxBackoff: time.Minute}
	if ps.backoff <= 0 {
		ps.backoff = time.Second
	}
	if ps.maxBackoff < ps.backoff {
		ps.maxBackoff = ps.backoff
	}
	for _, s := range specs {
		if s.Isolation == "" {
			s.Isolation = api.IsolationRunc
		}
		ps.list = append(ps.list, &pool{spec: s})
	}
	return ps
}

// holdsUID reports whether a member holds the host id range at h (user
// namespace allocation skips it). Callers hold m.idMu.
func (ps *pools) holdsUID(h uint32) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.uids[h]
}

// usesSnapshot reports whether a member's rootfs stands on snapshot id
// (a layer of its chain).
func (ps *pools) usesSnapshot(id string) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.list {
		for _, mb := range p.idle {
			for _, l := range mb.chain {
				if l.ID == id {
					return true
				}
			}
		}
	}
	return false
}

// usesImage reports whether a member runs on digest.
func (ps *pools) usesImage(digest string) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.list {
		for _, mb := range p.idle {
			if mb.digest == digest {
				return true
			}
		}
	}
	return false
}

// RunPools keeps the configured pools full until ctx ends, then tears
// the idle members down. Call it after Reconcile (which removes members
// a previous daemon left). Refill starts one member at a time, only when
// no live start waits for the start gate (admission.go's queue), and a
// pool whose refill failed waits with exponential backoff before it
// tries again; it never gives up and never drains members it has.
func (m *Manager) RunPools(ctx context.Context) {
	ps := m.pools
	if ps == nil {
		return
	}
	defer close(ps.done)
	defer ps.drain()
	for {
		next := ps.refillOne(ctx)
		if ctx.Err() != nil {
			return
		}
		if next == 0 {
			continue // more to do right away
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-ps.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// PoolsDone is closed once RunPools has returned and torn its members
// down (nil without pools).
func (m *Manager) PoolsDone() <-chan struct{} {
	if m.pools == nil {
		return nil
	}
	return m.pools.done
}

// wake asks the refill loop to look again (a member was claimed).
func (ps *pools) wake() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// refillOne starts one member for the pool that lacks the most and may
// try now, and returns how long the loop may wait before the next look
// (0: look again at once).
func (ps *pools) refillOne(ctx context.Context) time.Duration {
	now := time.Now()
	ps.mu.Lock()
	var pick *pool
	pickLack := 0
	wait := time.Hour
	quiet := time.Duration(now.UnixNano() - ps.lastClaim.Load())
	for _, p := range ps.list {
		target := ps.targetLocked(p, now)
		if p.spec.Adaptive || ps.m.budgetMembers() >= 0 {
			wait = min(wait, poolResize) // the target moves with time
		}
		if len(p.idle) > target && quiet >= poolResize {
			// Shrink by one, the member idle longest, once claims have
			// been quiet for a while (not in the middle of a burst).
			mb := p.idle[0]
			p.idle = p.idle[1:]
			p.shrinks++
			ps.mu.Unlock()
			ps.m.discardMember(context.WithoutCancel(ctx), mb)
			return 0
		}
		lack := target - len(p.idle) - p.starting
		if lack <= 0 {
			continue
		}
		if now.Before(p.retryAt) {
			if d := p.retryAt.Sub(now); d < wait {
				wait = d
			}
			continue
		}
		if pick == nil || lack > pickLack {
			pick, pickLack = p, lack
		}
	}
	if pick == nil {
		ps.mu.Unlock()
		return wait
	}
	pick.starting++
	ps.mu.Unlock()

	// A refill is the lowest-priority start: it waits out a burst of
	// claims (none for refillQuiet), then takes a slot of the start gate
	// only when no live create waits for one.
	for {
		quiet := time.Duration(time.Now().UnixNano() - ps.lastClaim.Load())
		if quiet >= refillQuiet {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(refillQuiet - quiet):
		}
		if ctx.Err() != nil {
			break
		}
	}
	release, err := ps.m.gate.acquireIdle(ctx)
	if err != nil {
		ps.mu.Lock()
		pick.starting--
		ps.mu.Unlock()
		return time.Millisecond
	}
	mb, err := ps.m.startMember(ctx, pick.spec)
	release()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pick.starting--
	if err != nil {
		pick.fails++
		pick.failures++
		pick.lastErr = err.Error()
		d := ps.backoff << min(pick.fails-1, 16)
		if d > ps.maxBackoff || d <= 0 {
			d = ps.maxBackoff
		}
		pick.retryAt = time.Now().Add(d)
		ps.m.cfg.Logf("pool %s: refill failed (%d in a row, next try in %s): %v", pick.spec.Image, pick.fails, d.Round(time.Millisecond), err)
		return 0
	}
	if pick.fails > 0 {
		ps.m.cfg.Logf("pool %s: refill works again after %d failures", pick.spec.Image, pick.fails)
	}
	pick.fails, pick.lastErr, pick.retryAt = 0, "", time.Time{}
	pick.refills++
	pick.digest = mb.digest
	mb.pool = pick
	pick.idle = append(pick.idle, mb)
	return 0
}

// drain tears down every idle member (the daemon stops).
func (ps *pools) drain() {
	ps.mu.Lock()
	var all []*member
	for _, p := range ps.list {
		all = append(all, p.idle...)
		p.idle = nil
	}
	ps.mu.Unlock()
	// A few at a time: each is a runtime delete, a netns and a mount.
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, mb := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			ps.m.discardMember(context.Background(), mb)
			<-sem
		}()
	}
	wg.Wait()
}

// take removes and returns an idle member, of a pool that spec accepts
// (given the digest its image resolved to at the last refill, "" before
// one), that ok accepts, or nil. It counts a miss when a pool matched but
// had no such member.
func (ps *pools) take(spec func(s PoolSpec, digest string) bool, ok func(*member) bool) *member {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var empty *pool
	for _, p := range ps.list {
		if !spec(p.spec, p.digest) {
			continue
		}
		for i, mb := range p.idle {
			if !ok(mb) {
				continue
			}
			p.idle = append(p.idle[:i:i], p.idle[i+1:]...)
			p.claims++
			p.demand.add(time.Now())
			ps.lastClaim.Store(time.Now().UnixNano())
			return mb
		}
		if empty == nil {
			empty = p
		}
	}
	if empty != nil {
		empty.misses++
		empty.demand.add(time.Now())
	}
	return nil
}

// releaseUID forgets a member's host id range once its sandbox's record
// holds it (or the member is gone).
func (ps *pools) releaseUID(h uint32) {
	ps.mu.Lock()
	delete(ps.uids, h)
	ps.mu.Unlock()
}

// Pools reports the node's warm pools (GET /v1/pools).
func (m *Manager) Pools() []api.Pool {
	ps := m.pools
	if ps == nil {
		return []api.Pool{}
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	now := time.Now()
	out := make([]api.Pool, 0, len(ps.list))
	for _, p := range ps.list {
		v := api.Pool{Node: m.nodeID(), Image: p.spec.Image, Digest: p.digest, Instance: p.spec.Instance, Isolation: p.spec.Isolation, Snapshot: p.spec.Snapshot,
			Size: ps.targetLocked(p, now), Ready: len(p.idle), Starting: p.starting,
			Claims: p.claims, Misses: p.misses, Refills: p.refills, Failures: p.failures, Shrinks: p.shrinks, LastError: p.lastErr,
			RatePerMin: math.Round(p.demand.perSecond(now)*60*100) / 100}
		if p.spec.Adaptive {
			v.Adaptive = &api.PoolRange{Min: p.spec.Min, Max: p.spec.Max}
		}
		if !p.retryAt.IsZero() {
			at := p.retryAt.UTC()
			v.RetryAt = &at
		}
		out = append(out, v)
	}
	return out
}

func (m *Manager) nodeID() string {
	if m.cfg.NodeName != "" {
		return m.cfg.NodeName
	}
	return LocalNodeID
}

// poolResources are the limits a pool's members start with.
func poolResources(s PoolSpec) api.Resources {
	_, r, err := resolveInstance(s.Instance, nil)
	if err != nil {
		_, r, _ = resolveInstance("", nil)
	}
	return r
}

// allocatePoolUID reserves a free host id range for a member: one no
// record and no other member holds.
func (m *Manager) allocatePoolUID(ctx context.Context) (uint32, error) {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	recs, err := m.listOwned(ctx)
	if err != nil {
		return 0, err
	}
	used := map[uint32]bool{}
	for _, r := range recs {
		if r.HostUID != 0 {
			used[r.HostUID] = true
		}
	}
	c := m.cfg.UserNS
	ps := m.pools
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i := 0; i < c.Count; i++ {
		h := c.Base + uint32(i)*c.Size
		if !used[h] && !ps.uids[h] {
			ps.uids[h] = true
			return h, nil
		}
	}
	return 0, errdefs.ResourceExhausted("no free user namespace range for a pool member: all %d ranges are in use", c.Count)
}

// poolStartTimeout bounds one member's start (its image included: the
// pool's image is normally on the host already).
func (m *Manager) poolStartTimeout() time.Duration { return m.cfg.StartTimeout + m.cfg.ImageTimeout }

func memberErr(step string, err error) error { return fmt.Errorf("pool member: %s: %w", step, err) }

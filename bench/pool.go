package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// PoolReport is the warm-pool scenario: time to interactive of creates
// that claim a member of the daemon's pool, one at a time (each after the
// pool refilled, untimed) and Burst at once from a full pool. The daemon
// must keep a pool of the image with instance=PoolInstance (berth serve
// --pool IMAGE=SIZE,instance=TYPE), a type other than the cold figures',
// so that those stay cold in the same run.
type PoolReport struct {
	Instance string `json:"instance"`
	Size     int    `json:"size"`
	// TTI is create → node -v exits 0, sequentially, each a claim. Its
	// split: Create is the create's answer at the client, ClaimServer
	// the claim's late binding at the server (its journal's start entry),
	// FirstExec the first node -v; SecondExec is node -v once more in
	// the same sandbox, as in one that has long been running, and
	// SecondTrue an exec of true there (the exec path without node).
	TTI         *Stat `json:"tti_ms"`
	Create      *Stat `json:"create_ms"`
	ClaimServer *Stat `json:"claim_server_ms,omitempty"`
	FirstExec   *Stat `json:"first_exec_ms"`
	SecondExec  *Stat `json:"second_exec_ms"`
	SecondTrue  *Stat `json:"second_true_ms"`
	// Claims and Misses are the pool's counters over the scenario.
	Claims int64 `json:"claims"`
	Misses int64 `json:"misses"`
	// Burst is Options.PoolBurst (else Burst) creates at once from a
	// pool as full as it gets (its size, or the burst if smaller); a
	// burst beyond the pool's size measures admission control: the
	// excess starts cold, waits or is refused with 429 (Status). nil
	// without a burst.
	Burst *BurstReport `json:"burst,omitempty"`
}

// claimTime reads the claim's binding time off name's journal: its start
// entry reads "<id> in <duration> (warm pool)".
func claimTime(ctx context.Context, c *client.Client, name string) (time.Duration, bool) {
	js, err := c.Journal(ctx, name)
	if err != nil {
		return 0, false
	}
	for _, j := range js {
		if j.Op != "start" || !strings.HasSuffix(j.Detail, "(warm pool)") {
			continue
		}
		f := strings.Fields(j.Detail)
		if len(f) >= 3 && f[1] == "in" {
			if d, err := time.ParseDuration(f[2]); err == nil {
				return d, true
			}
		}
	}
	return 0, false
}

// poolOf finds the daemon's pool for image and instance.
func poolOf(ctx context.Context, c *client.Client, image, instance string) (api.Pool, error) {
	list, err := c.ListPools(ctx)
	if err != nil {
		return api.Pool{}, err
	}
	for _, p := range list.Pools {
		if p.Image == image && p.Instance == instance {
			return p, nil
		}
	}
	return api.Pool{}, fmt.Errorf("the daemon keeps no warm pool of %s with instance=%s (berth serve --pool %s=100,instance=%s)", image, instance, image, instance)
}

// waitReady waits until the pool has n members ready (at most a minute).
func waitReady(ctx context.Context, c *client.Client, image, instance string, n int) (api.Pool, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := poolOf(ctx, c, image, instance)
		if err != nil || p.Ready >= n {
			return p, err
		}
		if time.Now().After(deadline) {
			return p, fmt.Errorf("the pool did not refill to %d within a minute: %+v", n, p)
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func poolScenario(ctx context.Context, c *client.Client, o Options, run string, logf func(string, ...any)) (*PoolReport, error) {
	p0, err := poolOf(ctx, c, o.Image, o.PoolInstance)
	if err != nil {
		return nil, err
	}
	rep := &PoolReport{Instance: o.PoolInstance, Size: p0.Size}
	logf("warm pool: %d creates, each claiming a member", o.N)
	var tti, creates, claims, first, second, trues []time.Duration
	nodeV := func(name string) (time.Duration, error) {
		t0 := time.Now()
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"node", "-v"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		if err != nil {
			return 0, fmt.Errorf("node -v in %s: %w", name, err)
		}
		return time.Since(t0), nil
	}
	for i := 0; i < o.N; i++ {
		if _, err := waitReady(ctx, c, o.Image, o.PoolInstance, 1); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("bench-%s-pool-%d", run, i)
		t0 := time.Now()
		if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.PoolInstance}); err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		dc := time.Since(t0)
		de, err := nodeV(name)
		if err != nil {
			return nil, err
		}
		tti, creates, first = append(tti, dc+de), append(creates, dc), append(first, de)
		if de, err = nodeV(name); err != nil {
			return nil, err
		}
		second = append(second, de)
		t1 := time.Now()
		if res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
			return nil, fmt.Errorf("true in %s: %+v %v", name, res, err)
		}
		trues = append(trues, time.Since(t1))
		if d, ok := claimTime(ctx, c, name); ok {
			claims = append(claims, d)
		}
		if err := c.Destroy(ctx, name); err != nil {
			return nil, err
		}
	}
	rep.TTI, rep.Create, rep.ClaimServer = summarize(tti), summarize(creates), summarize(claims)
	rep.FirstExec, rep.SecondExec, rep.SecondTrue = summarize(first), summarize(second), summarize(trues)
	p1, err := poolOf(ctx, c, o.Image, o.PoolInstance)
	if err != nil {
		return nil, err
	}
	rep.Claims, rep.Misses = p1.Claims-p0.Claims, p1.Misses-p0.Misses
	n := o.PoolBurst
	if n == 0 {
		n = o.Burst
	}
	if n > 0 {
		full := min(n, p1.Size)
		logf("warm pool: waiting for %d members, then %d creates at once", full, n)
		if _, err := waitReady(ctx, c, o.Image, o.PoolInstance, full); err != nil {
			return nil, err
		}
		po := o
		po.Instance = o.PoolInstance
		br, err := burstScenario(ctx, c, po, run+"-pool", n, logf)
		if err != nil {
			return nil, err
		}
		rep.Burst = br
	}
	return rep, nil
}

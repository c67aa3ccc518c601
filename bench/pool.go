package bench

import (
	"context"
	"fmt"
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
	// TTI is create → node -v exits 0, sequentially, each a claim.
	TTI *Stat `json:"tti_ms"`
	// Claims and Misses are the pool's counters over the scenario.
	Claims int64 `json:"claims"`
	Misses int64 `json:"misses"`
	// Burst is Options.Burst creates at once from a full pool (nil
	// without --burst, or when the pool is smaller than the burst).
	Burst *BurstReport `json:"burst,omitempty"`
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
	var tti []time.Duration
	for i := 0; i < o.N; i++ {
		if _, err := waitReady(ctx, c, o.Image, o.PoolInstance, 1); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("bench-%s-pool-%d", run, i)
		t0 := time.Now()
		if _, _, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.PoolInstance}); err != nil {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		res, err := c.Exec(ctx, name, api.ExecRequest{Argv: []string{"node", "-v"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			return nil, fmt.Errorf("node -v in %s: %+v %v", name, res, err)
		}
		tti = append(tti, d)
		if err := c.Destroy(ctx, name); err != nil {
			return nil, err
		}
	}
	rep.TTI = summarize(tti)
	p1, err := poolOf(ctx, c, o.Image, o.PoolInstance)
	if err != nil {
		return nil, err
	}
	rep.Claims, rep.Misses = p1.Claims-p0.Claims, p1.Misses-p0.Misses
	if o.Burst > 0 && p0.Size >= o.Burst {
		logf("warm pool: waiting for %d members, then %d creates at once", o.Burst, o.Burst)
		if _, err := waitReady(ctx, c, o.Image, o.PoolInstance, o.Burst); err != nil {
			return nil, err
		}
		po := o
		po.Instance = o.PoolInstance
		br, err := burstScenario(ctx, c, po, run+"-pool", o.Burst, logf)
		if err != nil {
			return nil, err
		}
		rep.Burst = br
	}
	return rep, nil
}

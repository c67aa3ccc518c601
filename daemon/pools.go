package daemon

import (
	"context"

	"github.com/berth-sh/berth/node/local"
	"github.com/berth-sh/berth/policy"
)

// poolSpecs are the node's warm pools: the operator policy's, then
// --pool's (a flag naming the same image, instance and isolation as the
// policy replaces the policy's size).
func poolSpecs(cfg Config, pol *policy.Policy) ([]local.PoolSpec, error) {
	var raw []string
	if pol != nil {
		raw = append(raw, pol.Pools...)
	}
	raw = append(raw, cfg.Pools...)
	var out []local.PoolSpec
	at := map[[4]string]int{}
	for _, r := range raw {
		p, err := local.ParsePoolSpec(r)
		if err != nil {
			return nil, err
		}
		k := [4]string{p.Image, p.Instance, p.Isolation, p.Snapshot}
		if i, ok := at[k]; ok {
			out[i] = p
			continue
		}
		at[k] = len(out)
		out = append(out, p)
	}
	return out, nil
}

// waitPools waits (until ctx ends) for the warm pools' members to be torn
// down as the daemon stops; Reconcile removes what is left otherwise.
func waitPools(ctx context.Context, mgr *local.Manager) {
	d := mgr.PoolsDone()
	if d == nil {
		return
	}
	select {
	case <-d:
	case <-ctx.Done():
	}
}

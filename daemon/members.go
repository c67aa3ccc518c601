package daemon

import (
	"context"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/membership"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store"
)

// defaults fills the node's name and timing and checks role, labels and
// timing, so that a bad flag stops berth serve before it touches the host.
func (c *NodeConfig) defaults() error {
	if c.Name == "" {
		name, err := membership.DefaultName()
		if err != nil {
			return err
		}
		c.Name = name
	} else if err := api.ValidateNodeName(c.Name); err != nil {
		return errdefs.InvalidArgument("--node-name: %w", err)
	}
	if c.Beat == 0 {
		c.Beat = membership.DefaultInterval
	}
	if c.Stale == 0 {
		c.Stale = membership.DefaultStale
	}
	if err := membership.ValidateTiming(c.Beat, c.Stale); err != nil {
		return err
	}
	if _, err := membership.ParseRole(c.Role); err != nil {
		return err
	}
	_, err := membership.ParseLabels(c.Labels)
	return err
}

// startMembership writes this process's entry now and every heartbeat
// from then on (a failure is logged, never fatal). addr is the node API's
// advertised URL; "" while the process serves none (a single host).
func startMembership(ctx context.Context, c NodeConfig, addr string, started time.Time, st store.Cluster, nd node.Node, logf func(string, ...any)) (*membership.Loop, error) {
	roles, err := membership.ParseRole(c.Role)
	if err != nil {
		return nil, err
	}
	labels, err := membership.ParseLabels(c.Labels)
	if err != nil {
		return nil, err
	}
	loop, err := membership.New(st, nd, membership.Config{
		Name: c.Name, Addr: addr, Roles: roles, Labels: labels, Interval: c.Beat, Stale: c.Stale, StartedAt: started, Logf: logf,
	})
	if err != nil {
		return nil, err
	}
	loop.Start(ctx)
	logf("node %q (roles %v): heartbeat every %s, stale after %s", c.Name, roles, c.Beat, c.Stale)
	return loop, nil
}

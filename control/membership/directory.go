package membership

import (
	"context"
	"sort"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/store"
)

// SandboxLister is the part of the state store the directory counts each
// node's sandboxes from.
type SandboxLister interface {
	List(ctx context.Context) ([]store.Sandbox, error)
}

// Directory is the membership as the API shows it: control.Nodes over the
// store's entries, each with its health by Alive against the store's now.
// It reads the store on every call and keeps nothing, so every control
// plane process answers the same.
type Directory struct {
	cluster   store.Cluster
	sandboxes SandboxLister
	local     string
	stale     time.Duration
}

var _ control.Nodes = (*Directory)(nil)

// NewDirectory reads entries from cluster and sandbox records from
// sandboxes (nil: every count is 0). local is this process's node, the
// one a record without an owner is counted on (records made before
// cluster mode). stale is the liveness bound (0: DefaultStale).
func NewDirectory(cluster store.Cluster, sandboxes SandboxLister, local string, stale time.Duration) *Directory {
	if stale == 0 {
		stale = DefaultStale
	}
	return &Directory{cluster: cluster, sandboxes: sandboxes, local: local, stale: stale}
}

// ListNodes implements control.Nodes.
func (d *Directory) ListNodes(ctx context.Context) (api.NodeList, error) {
	entries, err := d.cluster.Nodes(ctx)
	if err != nil {
		return api.NodeList{}, err
	}
	now, err := d.cluster.Now(ctx)
	if err != nil {
		return api.NodeList{}, err
	}
	counts, err := d.counts(ctx)
	if err != nil {
		return api.NodeList{}, err
	}
	out := api.NodeList{Nodes: make([]api.Node, 0, len(entries)), StaleAfterMs: d.stale.Milliseconds()}
	for _, n := range entries {
		out.Nodes = append(out.Nodes, d.view(n, now, counts[n.Name]))
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	return out, nil
}

// GetNode implements control.Nodes.
func (d *Directory) GetNode(ctx context.Context, name string) (api.Node, error) {
	if err := api.ValidateNodeName(name); err != nil {
		return api.Node{}, err
	}
	n, err := d.cluster.GetNode(ctx, name)
	if err != nil {
		return api.Node{}, err
	}
	now, err := d.cluster.Now(ctx)
	if err != nil {
		return api.Node{}, err
	}
	counts, err := d.counts(ctx)
	if err != nil {
		return api.Node{}, err
	}
	return d.view(n, now, counts[name]), nil
}

// SetNodeDraining implements control.Nodes. Draining is kept in the
// store, so the node's own heartbeats leave it as set.
func (d *Directory) SetNodeDraining(ctx context.Context, name string, draining bool) (api.Node, error) {
	if err := api.ValidateNodeName(name); err != nil {
		return api.Node{}, err
	}
	if err := d.cluster.SetNodeDraining(ctx, name, draining); err != nil {
		return api.Node{}, err
	}
	return d.GetNode(ctx, name)
}

// owned counts the sandbox records of one node.
type owned struct{ total, running, sleeping int }

// counts is the number of sandbox records per node, by state.
func (d *Directory) counts(ctx context.Context) (map[string]owned, error) {
	out := map[string]owned{}
	if d.sandboxes == nil {
		return out, nil
	}
	recs, err := d.sandboxes.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		owner := r.Owner
		if owner == "" {
			owner = d.local
		}
		c := out[owner]
		c.total++
		switch r.State {
		case api.StateRunning, api.StateStarting:
			c.running++
		case api.StateSleeping:
			c.sleeping++
		}
		out[owner] = c
	}
	return out, nil
}

// view is an entry as the API shows it.
func (d *Directory) view(n store.Node, now time.Time, sandboxes owned) api.Node {
	v := api.Node{
		Name: n.Name, Addr: n.Addr, Roles: orEmpty(n.Roles),
		Capacity:  api.NodeResources(n.Capacity),
		Committed: api.NodeResources(n.Committed),
		InFlight:  n.InFlight, Isolation: orEmpty(n.Isolation), Labels: n.Labels,
		Sandboxes: sandboxes.total, Running: sandboxes.running, Sleeping: sandboxes.sleeping, Images: orEmpty(n.Images), Layers: n.Layers,
		Draining: n.Draining, Epoch: n.Epoch, StartedAt: n.StartedAt, Heartbeat: n.Heartbeat,
		HeartbeatAgeMs: max(now.Sub(n.Heartbeat).Milliseconds(), 0),
		Health:         Health(n.Heartbeat, now, d.stale),
	}
	for _, b := range n.Layers {
		v.LayerBytes += b
	}
	return v
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

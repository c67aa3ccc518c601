package placement

import (
	"context"
	"fmt"
	"math"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
)

// PlacerConfig configures NewPlacer: where a create's inputs to Place come
// from. Only Nodes is required.
type PlacerConfig struct {
	// Nodes is the process's view of the node list.
	Nodes *NodeCache
	// Resources is what a create commits on its node (the node's own
	// instance table: node/local.ResolveInstance). Nil: nothing, so only
	// a node's own Full answer stops a start.
	Resources func(instance string, custom *api.Resources) (api.Resources, error)
	// Image resolves a create's image ("" is the default image) to the
	// digest nodes report holding; "" when this process does not know it
	// (no node then scores the image term).
	Image func(ctx context.Context, ref string) string
	// Snapshots reads a snapshot's chain for the locality term; nil: the
	// chain is not scored.
	Snapshots interface {
		GetSnapshot(ctx context.Context, id string) (store.Snapshot, error)
	}
	// Policy bounds the nodes of each tenant (Tenant.NodeLabels); nil: none.
	Policy *policy.Policy
	// DefaultIsolation applies when a create names none ("" is runc).
	DefaultIsolation string
	// Options tune Place.
	Options Options
	Logf    func(format string, args ...any)
}

// Placer chooses the node of a new sandbox from a create request: it turns
// the request into a Request (resources, isolation, tenant bounds, image
// digest and snapshot chain), places it on the cached node list and records
// the decision in the cache (anti-herding). It implements forward.Placer.
type Placer struct {
	c PlacerConfig
}

// NewPlacer returns a Placer.
func NewPlacer(c PlacerConfig) *Placer {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return &Placer{c: c}
}

// Place returns the chosen node's name. Errors are Place's (unavailable,
// invalid argument, resource exhausted, each naming what excluded the
// nodes) or the store's, as unavailable.
func (p *Placer) Place(ctx context.Context, req api.CreateSandboxRequest) (string, error) {
	r, err := p.request(ctx, req)
	if err != nil {
		return "", err
	}
	// The pick is confirmed against its node's own entry, read fresh: the
	// cached list may predate a drain by up to 3 s. A pick that is
	// draining (or gone) is marked so in the cache and the create placed
	// again, a few times at most.
	for try := 1; ; try++ {
		nodes, now, err := p.c.Nodes.Nodes(ctx)
		if err != nil {
			return "", errdefs.Wrap(errdefs.ErrUnavailable, err, "place sandbox %q: read the node list: %v", req.Name, err)
		}
		d, err := Place(nodes, now, r, p.c.Options)
		if err != nil {
			return "", fmt.Errorf("place sandbox %q: %w", req.Name, err) // Place's kind
		}
		n, err := p.c.Nodes.Fresh(ctx, d.Node.Name)
		if try == maxPicks && (err == nil && n.Draining || errdefs.IsKind(err, errdefs.ErrNotFound)) {
			return "", errdefs.Unavailable("place sandbox %q: %d picks in a row were draining or left the cluster as they were chosen; retry", req.Name, try)
		}
		switch {
		case errdefs.IsKind(err, errdefs.ErrNotFound):
			p.c.Logf("place sandbox %s: node %s left the cluster; placing again", req.Name, d.Node.Name)
			continue
		case err != nil:
			return "", fmt.Errorf("place sandbox %q: %w", req.Name, err)
		case n.Draining:
			p.c.Logf("place sandbox %s: node %s is draining since the node list was read; placing again", req.Name, d.Node.Name)
			continue
		}
		p.c.Nodes.Placed(d.Node.Name, r.Resources)
		return d.Node.Name, nil
	}
}

// maxPicks bounds how many picks one Place confirms: each refused pick
// is out of the next one's list, so only nodes draining one after another
// as they are picked reach it.
const maxPicks = 5

// request is Place's input for req.
func (p *Placer) request(ctx context.Context, req api.CreateSandboxRequest) (Request, error) {
	tenant := policy.TenantFrom(ctx)
	r := Request{
		Isolation:   req.Isolation,
		Tenant:      tenant,
		TenantNodes: p.c.Policy.NodeLabels(tenant),
	}
	if r.Isolation == "" {
		r.Isolation = p.c.DefaultIsolation
	}
	if p.c.Resources != nil {
		res, err := p.c.Resources(req.Instance, req.Resources)
		if err != nil {
			return Request{}, err
		}
		r.Resources = store.NodeResources{
			MilliCPU:    int64(math.Round(res.VCPU * 1000)),
			MemoryBytes: res.MemoryMiB << 20,
			DiskBytes:   res.DiskMB * 1000 * 1000, // instance disks are decimal MB
		}
	}
	if req.Snapshot != "" && p.c.Snapshots != nil {
		snap, err := p.c.Snapshots.GetSnapshot(ctx, req.Snapshot)
		switch {
		case err == nil:
			r.Chain = p.chain(ctx, snap)
			if req.Image == "" {
				r.Image = snap.BaseImageDigest
			}
		case errdefs.IsKind(err, errdefs.ErrNotFound):
			// The node answers the create with its own not found.
		default:
			p.c.Logf("place sandbox %s: snapshot %s: %v (placing without locality)", req.Name, req.Snapshot, err)
		}
	}
	if r.Image == "" && p.c.Image != nil {
		r.Image = p.c.Image(ctx, req.Image)
	}
	return r, nil
}

// chain is snap's layers with their compressed sizes. A layer is a
// snapshot of its own (its ID names it); one that cannot be read counts
// one byte, so that holding it still scores.
func (p *Placer) chain(ctx context.Context, snap store.Snapshot) []Layer {
	out := make([]Layer, 0, len(snap.Chain))
	for _, l := range snap.Chain {
		size := int64(1)
		if l.ID == snap.ID {
			size = max(snap.SizeBytes, 1)
		} else if s, err := p.c.Snapshots.GetSnapshot(ctx, l.ID); err == nil {
			size = max(s.SizeBytes, 1)
		}
		out = append(out, Layer{Digest: l.SHA256, Bytes: size})
	}
	return out
}

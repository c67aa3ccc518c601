package placement

import (
	"slices"

	"github.com/berth-sh/berth/store"
)

// The default weights. Free capacity is the unit: a term worth 1 weighs as
// much as the difference between an empty node and a full one.
const (
	// WeightImage: a node without the image digest pulls it from the
	// cluster's blob store and unpacks it before the sandbox can start,
	// seconds to tens of seconds on the create path; that outweighs any
	// difference in load (up to two whole nodes of free capacity).
	WeightImage = 2.0
	// WeightChain: a node without the snapshot chain downloads and
	// unpacks every missing byte before the wake, the bulk of a restore.
	// It weighs more than the image, because a chain is unique to a
	// sandbox (or a fork family) while images are held widely, and more
	// than free capacity plus preferred owner (2), so that a node holding
	// the whole chain with room wins over an empty one: the locality that
	// pure spreading loses (CubeSandbox's A/B in issue 14).
	WeightChain = 3.0
	// WeightFree spreads load: the share of the scarcest resource left
	// after placing.
	WeightFree = 1.0
	// WeightInFlight with InFlightHalf is the anti-herding term: each
	// create in flight on a node holds its CPU and disk (unpack, mount,
	// agent start), and nodes report InFlight only on their next
	// heartbeat. The first create in flight costs 0.8, more than any
	// free-capacity gap under 80%, so a burst over equal nodes goes round
	// robin. The penalty saturates at 4: a node holding the whole chain
	// (3 ahead) keeps a burst until about 12 creates are in flight there,
	// beyond which fetching the chain elsewhere is quicker than queueing.
	WeightInFlight = 4.0
	InFlightHalf   = 4
	// WeightPreferred favours the sandbox's previous owner, which may
	// hold what its entry does not list (page cache, a local copy of the
	// writable layer): one node of free capacity, less than the chain, so
	// the listed holdings decide first.
	WeightPreferred = 1.0
	// WeightAffinity and WeightAntiAffinity are a user's soft label
	// preferences: one node of free capacity, enough to choose among
	// comparable nodes, never enough to outweigh a held image or chain (a
	// label that must hold belongs in Request.Selector).
	WeightAffinity     = 1.0
	WeightAntiAffinity = 1.0
)

// DefaultMargin is the spread: candidates scoring within it of the best
// are picked uniformly. 0.05 is 5% of one node's free capacity, a load
// difference that does not matter, and smaller than the anti-herding step
// of one more create in flight up to 13 in flight on a node
// (WeightInFlight·InFlightHalf/((n+4)(n+5)) = 0.052 at n = 13), so the
// spread never undoes anti-herding or locality.
const DefaultMargin = 0.05

// Weights are the soft score's weights (DefaultWeights: the Weight*
// constants). Options.Weights replaces them; a zero weight drops its term.
type Weights struct {
	Image, Chain, Free, InFlight, Preferred, Affinity, AntiAffinity float64
}

// DefaultWeights returns the Weight* constants.
func DefaultWeights() Weights {
	return Weights{
		Image: WeightImage, Chain: WeightChain, Free: WeightFree, InFlight: WeightInFlight,
		Preferred: WeightPreferred, Affinity: WeightAffinity, AntiAffinity: WeightAntiAffinity,
	}
}

func (w Weights) score(t Terms) float64 {
	return w.Image*t.Image + w.Chain*t.Chain + w.Free*t.Free - w.InFlight*t.InFlight +
		w.Preferred*t.Preferred + w.Affinity*t.Affinity - w.AntiAffinity*t.AntiAffinity
}

// terms computes a candidate's soft-score inputs; n passed every hard
// constraint, so the request fits in its free capacity.
func terms(n *store.Node, req Request, chainBytes int64) Terms {
	var t Terms
	if req.Image != "" && slices.Contains(n.Images, req.Image) {
		t.Image = 1
	}
	if len(req.Chain) > 0 {
		var cached int64
		var cachedLayers int
		for _, l := range req.Chain {
			if _, ok := n.Layers[l.Digest]; ok {
				cached += l.Bytes
				cachedLayers++
			}
		}
		if chainBytes > 0 {
			t.Chain = float64(cached) / float64(chainBytes)
		} else {
			// A chain of empty layers: the share of layers held.
			t.Chain = float64(cachedLayers) / float64(len(req.Chain))
		}
	}
	t.Free = freeAfter(n.Capacity, n.Committed, req.Resources)
	if n.InFlight > 0 {
		t.InFlight = float64(n.InFlight) / float64(n.InFlight+InFlightHalf)
	}
	if req.Preferred != "" && n.Name == req.Preferred {
		t.Preferred = 1
	}
	t.Affinity = labelShare(n.Labels, req.Affinity)
	t.AntiAffinity = labelShare(n.Labels, req.AntiAffinity)
	return t
}

// freeAfter is the smallest share of a resource left free once r is
// placed, over the resources the node offers (a zero capacity is not
// offered, and cannot be the bottleneck of a request that fits).
func freeAfter(c, used, r store.NodeResources) float64 {
	free := 1.0
	offered := false
	for _, d := range [][3]int64{
		{c.MilliCPU, used.MilliCPU, r.MilliCPU},
		{c.MemoryBytes, used.MemoryBytes, r.MemoryBytes},
		{c.DiskBytes, used.DiskBytes, r.DiskBytes},
	} {
		if d[0] <= 0 {
			continue
		}
		offered = true
		f := float64(d[0]-d[1]-d[2]) / float64(d[0])
		free = min(free, max(f, 0))
	}
	if !offered {
		return 0
	}
	return free
}

func labelShare(have, want map[string]string) float64 {
	if len(want) == 0 {
		return 0
	}
	n := 0
	for k, v := range want {
		if got, ok := have[k]; ok && got == v {
			n++
		}
	}
	return float64(n) / float64(len(want))
}

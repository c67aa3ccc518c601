package placement

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/membership"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// RoleNode is the role a node entry must list to take sandboxes.
const RoleNode = "node"

// DefaultStaleness is how old a heartbeat may be before its node is dead
// for placement: membership's bound, so `berth node ls` and placement
// agree (Options.Staleness overrides it).
const DefaultStaleness = membership.DefaultStale

// Request is what one sandbox asks of a node.
type Request struct {
	// Resources the sandbox commits on its node.
	Resources store.NodeResources
	// Isolation is api.IsolationRunc or api.IsolationGVisor; "" is runc.
	Isolation string
	// Selector: the node must carry every one of these labels, same value.
	Selector map[string]string
	// Affinity and AntiAffinity are soft: nodes with more of these labels
	// (same value) score higher, respectively lower.
	Affinity     map[string]string
	AntiAffinity map[string]string
	// Tenant names the caller's tenant, for messages only.
	Tenant string
	// TenantNodes is the operator policy's restriction for the tenant
	// (policy.Policy.NodeLabels): for every key, the node's label must be
	// one of the values. Nil: any node.
	TenantNodes map[string][]string
	// Image is the image digest the sandbox runs ("" scores no one).
	Image string
	// Chain is the snapshot chain the sandbox starts from, with each
	// layer's bytes; empty for a fresh sandbox.
	Chain []Layer
	// Preferred is the sandbox's previous owner, if any.
	Preferred string
}

// Layer is one layer of a snapshot chain: its sha256 hex digest (the key of
// store.Node.Layers) and its compressed size.
type Layer struct {
	Digest string
	Bytes  int64
}

// Rand is the randomness of the spread among near-best candidates
// (*rand.Rand from math/rand/v2 has it; tests give a seeded one).
type Rand interface {
	IntN(n int) int
}

// Options tune Place; the zero value is the default everywhere.
type Options struct {
	// Staleness bounds a live node's heartbeat age; 0: DefaultStaleness.
	Staleness time.Duration
	// Weights replaces the default weights (DefaultWeights) when not nil.
	Weights *Weights
	// Margin is how far below the best score a candidate may be and still
	// be picked; 0: DefaultMargin; negative: no spread (the best, ties by
	// name).
	Margin float64
	// Rand drives the spread; nil: math/rand/v2's global source.
	Rand Rand
}

// Constraint names a hard constraint, as Exclusion and the error report it.
type Constraint string

// The hard constraints, in the order messages list them.
const (
	NotNode     Constraint = "role"      // Roles lacks "node"
	Stale       Constraint = "stale"     // heartbeat older than the bound
	Draining    Constraint = "draining"  // berth node drain
	NoIsolation Constraint = "isolation" // the backend is not offered
	NoLabels    Constraint = "labels"    // Request.Selector not met
	NotTenant   Constraint = "tenant"    // outside the tenant's nodes
	TooSmall    Constraint = "too-small" // Capacity below the request
	Full        Constraint = "full"      // Capacity - Committed below it
)

var constraintOrder = []Constraint{NotNode, Stale, Draining, NoIsolation, NoLabels, NotTenant, TooSmall, Full}

// Exclusion is a node that failed hard constraints, with all it failed.
type Exclusion struct {
	Node    string
	Reasons []Constraint
}

// Candidate is a node that passed every hard constraint, with its terms
// and its score.
type Candidate struct {
	Node  string
	Score float64
	Terms Terms
	at    int // index in Place's nodes
}

// Terms are a candidate's soft-score inputs, each in [0, 1], before
// weighting (see the package documentation for the formula).
type Terms struct {
	Image        float64 // 1 if the node holds Request.Image
	Chain        float64 // share of the chain's bytes the node caches
	Free         float64 // smallest free share of a resource after placing
	InFlight     float64 // InFlight / (InFlight + InFlightHalf)
	Preferred    float64 // 1 on Request.Preferred
	Affinity     float64 // share of Request.Affinity the node matches
	AntiAffinity float64 // share of Request.AntiAffinity the node matches
}

// Decision is a placement and its explanation.
type Decision struct {
	// Node is the chosen node's entry, as it was given to Place.
	Node store.Node
	// Candidates are every node that passed the hard constraints, best
	// first (ties by name); Candidates[:NearBest] were within the margin
	// of the best, and the pick was uniform among them.
	Candidates []Candidate
	NearBest   int
	// Excluded are the nodes that failed a hard constraint, by name.
	Excluded []Exclusion
}

// Place chooses the node for req among nodes, judging heartbeats against
// now (the store's clock). It does no I/O. The error, when no node
// qualifies, is unavailable, invalid argument or resource exhausted (see
// the package documentation) and counts the nodes each constraint excluded.
func Place(nodes []store.Node, now time.Time, req Request, opts Options) (Decision, error) {
	if err := req.check(); err != nil {
		return Decision{}, err
	}
	staleness := cmp.Or(opts.Staleness, DefaultStaleness)
	w := DefaultWeights()
	if opts.Weights != nil {
		w = *opts.Weights
	}
	margin := opts.Margin
	if margin == 0 {
		margin = DefaultMargin
	}
	isolation := cmp.Or(req.Isolation, api.IsolationRunc)
	chainBytes := req.chainBytes()

	d := Decision{Candidates: make([]Candidate, 0, len(nodes)), Excluded: make([]Exclusion, 0, len(nodes))}
	// Every exclusion's reasons live in one backing array: one allocation
	// instead of one per excluded node (most of a big cluster, usually).
	arena := make([]Constraint, 0, 2*len(nodes))
	var buf [8]Constraint // one per constraint in constraintOrder
	var sandboxNodes, couldEver, couldNow int
	counts := map[Constraint]int{}
	for i := range nodes {
		n := &nodes[i]
		reasons := hardFailures(buf[:0], n, now, staleness, isolation, req)
		if !slices.Contains(reasons, NotNode) {
			sandboxNodes++
			if !anyOf(reasons, NoIsolation, NoLabels, NotTenant, TooSmall) {
				couldEver++
				if !anyOf(reasons, Stale, Draining) {
					couldNow++
				}
			}
		}
		if len(reasons) > 0 {
			for _, c := range reasons {
				counts[c]++
			}
			start := len(arena)
			arena = append(arena, reasons...)
			d.Excluded = append(d.Excluded, Exclusion{Node: n.Name, Reasons: arena[start:len(arena):len(arena)]})
			continue
		}
		t := terms(n, req, chainBytes)
		d.Candidates = append(d.Candidates, Candidate{Node: n.Name, Terms: t, Score: w.score(t), at: i})
	}
	byName := func(a, b Exclusion) int { return strings.Compare(a.Node, b.Node) }
	if !slices.IsSortedFunc(d.Excluded, byName) { // Cluster.Nodes already orders by name
		slices.SortFunc(d.Excluded, byName)
	}
	if len(d.Candidates) == 0 {
		return d, noNode(len(nodes), sandboxNodes, couldEver, couldNow, counts, staleness, isolation, req)
	}
	slices.SortFunc(d.Candidates, func(a, b Candidate) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	best := d.Candidates[0].Score
	d.NearBest = 1
	if margin > 0 {
		for d.NearBest < len(d.Candidates) && d.Candidates[d.NearBest].Score >= best-margin {
			d.NearBest++
		}
	}
	pick := 0
	if d.NearBest > 1 {
		if opts.Rand != nil {
			pick = opts.Rand.IntN(d.NearBest)
		} else {
			pick = rand.IntN(d.NearBest)
		}
	}
	d.Node = nodes[d.Candidates[pick].at]
	return d, nil
}

func (r Request) check() error {
	res := r.Resources
	if res.MilliCPU < 0 || res.MemoryBytes < 0 || res.DiskBytes < 0 {
		return errdefs.InvalidArgument("placement request with negative resources (%s)", fmtRes(res))
	}
	for _, l := range r.Chain {
		if l.Bytes < 0 {
			return errdefs.InvalidArgument("snapshot layer %s has negative size %d", l.Digest, l.Bytes)
		}
	}
	return nil
}

func (r Request) chainBytes() int64 {
	var total int64
	for _, l := range r.Chain {
		total += l.Bytes
	}
	return total
}

// hardFailures appends to out every hard constraint n fails, in
// constraintOrder.
func hardFailures(out []Constraint, n *store.Node, now time.Time, staleness time.Duration, isolation string, req Request) []Constraint {
	if !slices.Contains(n.Roles, RoleNode) {
		out = append(out, NotNode)
	}
	// membership's one liveness rule: a heartbeat ahead of now (a store
	// clock that stepped back) counts as fresh.
	if !membership.Alive(n.Heartbeat, now, staleness) {
		out = append(out, Stale)
	}
	if n.Draining {
		out = append(out, Draining)
	}
	if !slices.Contains(n.Isolation, isolation) {
		out = append(out, NoIsolation)
	}
	for k, v := range req.Selector {
		if got, ok := n.Labels[k]; !ok || got != v {
			out = append(out, NoLabels)
			break
		}
	}
	for k, allowed := range req.TenantNodes {
		if got, ok := n.Labels[k]; !ok || !slices.Contains(allowed, got) {
			out = append(out, NotTenant)
			break
		}
	}
	r := req.Resources
	c, u := n.Capacity, n.Committed
	switch {
	case r.MilliCPU > c.MilliCPU || r.MemoryBytes > c.MemoryBytes || r.DiskBytes > c.DiskBytes:
		out = append(out, TooSmall)
	case r.MilliCPU > c.MilliCPU-u.MilliCPU || r.MemoryBytes > c.MemoryBytes-u.MemoryBytes || r.DiskBytes > c.DiskBytes-u.DiskBytes:
		out = append(out, Full)
	}
	return out
}

func anyOf(have []Constraint, want ...Constraint) bool {
	for _, c := range want {
		if slices.Contains(have, c) {
			return true
		}
	}
	return false
}

// noNode is the error for a request no node takes. Its kind follows the
// furthest any node got: no sandbox node at all, or none that could ever
// take the request is alive and undrained (unavailable: wait, or bring
// nodes back); none could ever take it (invalid argument: the request or
// the cluster must change); some could, but are full (resource exhausted).
func noNode(total, sandboxNodes, couldEver, couldNow int, counts map[Constraint]int, staleness time.Duration, isolation string, req Request) error {
	var parts []string
	for _, c := range constraintOrder {
		if n := counts[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, describe(c, staleness, isolation, req)))
		}
	}
	detail := fmt.Sprintf("of %d nodes: %s", total, strings.Join(parts, "; "))
	if total == 0 {
		detail = "the cluster has no nodes"
	}
	switch {
	case sandboxNodes == 0:
		return errdefs.Unavailable("no node can take this sandbox: no node runs sandboxes (%s)", detail)
	case couldEver == 0:
		return errdefs.InvalidArgument("no node can ever take this sandbox as asked (%s); a node may fail several constraints", detail)
	case couldNow == 0:
		return errdefs.Unavailable("no node that could take this sandbox is alive and undrained (%s); a node may fail several constraints", detail)
	default:
		return errdefs.ResourceExhausted("every node that could take this sandbox is full (%s); a node may fail several constraints", detail)
	}
}

func describe(c Constraint, staleness time.Duration, isolation string, req Request) string {
	switch c {
	case NotNode:
		return "without the node role"
	case Stale:
		return fmt.Sprintf("stale (no heartbeat for %s)", staleness)
	case Draining:
		return "draining"
	case NoIsolation:
		return "without isolation " + isolation
	case NoLabels:
		return "without labels " + fmtLabels(req.Selector)
	case NotTenant:
		who := "the tenant"
		if req.Tenant != "" {
			who = "tenant " + req.Tenant
		}
		return fmt.Sprintf("outside %s's nodes (%s)", who, fmtAllowed(req.TenantNodes))
	case TooSmall:
		return "too small for " + fmtRes(req.Resources)
	case Full:
		return "without free room for " + fmtRes(req.Resources)
	}
	return string(c)
}

func fmtLabels(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func fmtAllowed(m map[string][]string) string {
	var s []string
	for k, vs := range m {
		s = append(s, k+" in ["+strings.Join(vs, " ")+"]")
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

func fmtRes(r store.NodeResources) string {
	return fmt.Sprintf("%dm CPU, %s memory, %s disk", r.MilliCPU, fmtBytes(r.MemoryBytes), fmtBytes(r.DiskBytes))
}

func fmtBytes(b int64) string {
	const gib, mib = 1 << 30, 1 << 20
	switch {
	case b >= gib:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(b)/gib), ".0") + " GiB"
	case b >= mib:
		return fmt.Sprintf("%d MiB", b/mib)
	}
	return fmt.Sprintf("%d B", b)
}

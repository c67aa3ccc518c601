package placement

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

const gib = 1 << 30

var t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

// small is a sandbox's worth: 1 vCPU, 2 GiB, 10 GiB.
var small = store.NodeResources{MilliCPU: 1000, MemoryBytes: 2 * gib, DiskBytes: 10 * gib}

// node returns a healthy, empty 8 vCPU / 16 GiB / 100 GiB node that
// heartbeat at t0, changed by the mutators.
func node(name string, mut ...func(*store.Node)) store.Node {
	n := store.Node{
		Name:      name,
		Roles:     []string{"control", "node"},
		Capacity:  store.NodeResources{MilliCPU: 8000, MemoryBytes: 16 * gib, DiskBytes: 100 * gib},
		Isolation: []string{api.IsolationRunc, api.IsolationGVisor},
		Labels:    map[string]string{"pool": "shared", "zone": "a"},
		Images:    []string{imgA},
		Layers:    map[string]int64{},
		Heartbeat: t0,
	}
	for _, m := range mut {
		m(&n)
	}
	return n
}

const imgA = "sha256:aaaa"

func seeded() Options { return Options{Rand: rand.New(rand.NewPCG(1, 2))} }

func kindOf(err error) error {
	for _, k := range []error{errdefs.ErrUnavailable, errdefs.ErrInvalidArgument, errdefs.ErrResourceExhausted} {
		if errdefs.IsKind(err, k) {
			return k
		}
	}
	return nil
}

func TestHardConstraints(t *testing.T) {
	base := Request{Resources: small, Image: imgA}
	cases := []struct {
		name     string
		mut      func(*store.Node) // makes the bad node fail
		req      func(*Request)
		good     func(*store.Node) // makes the good node pass, if it needs to
		reason   Constraint
		kind     error
		msgParts []string
	}{
		{"role", func(n *store.Node) { n.Roles = []string{"control"} }, nil,
			nil, NotNode, errdefs.ErrUnavailable, []string{"1 without the node role", "no node runs sandboxes"}},
		{"stale", func(n *store.Node) { n.Heartbeat = t0.Add(-10*time.Second - time.Millisecond) }, nil,
			nil, Stale, errdefs.ErrUnavailable, []string{"1 stale (no heartbeat for 10s)"}},
		{"draining", func(n *store.Node) { n.Draining = true }, nil,
			nil, Draining, errdefs.ErrUnavailable, []string{"1 draining"}},
		{"isolation", func(n *store.Node) { n.Isolation = []string{api.IsolationRunc} },
			func(r *Request) { r.Isolation = api.IsolationGVisor },
			nil, NoIsolation, errdefs.ErrInvalidArgument, []string{"1 without isolation gvisor"}},
		{"isolation default is runc", func(n *store.Node) { n.Isolation = []string{api.IsolationGVisor} }, nil,
			nil, NoIsolation, errdefs.ErrInvalidArgument, []string{"1 without isolation runc"}},
		{"labels", nil, func(r *Request) { r.Selector = map[string]string{"pool": "gpu", "zone": "a"} },
			func(n *store.Node) { n.Labels = map[string]string{"pool": "gpu", "zone": "a"} },
			NoLabels, errdefs.ErrInvalidArgument, []string{"1 without labels pool=gpu,zone=a"}},
		{"tenant", nil, func(r *Request) {
			r.Tenant = "acme"
			r.TenantNodes = map[string][]string{"pool": {"acme", "acme-big"}}
		}, func(n *store.Node) { n.Labels["pool"] = "acme-big" }, NotTenant, errdefs.ErrInvalidArgument, []string{"1 outside tenant acme's nodes (pool in [acme acme-big])"}},
		{"too small", nil, func(r *Request) { r.Resources.MemoryBytes = 32 * gib },
			func(n *store.Node) { n.Capacity.MemoryBytes = 64 * gib },
			TooSmall, errdefs.ErrInvalidArgument, []string{"1 too small for 1000m CPU, 32 GiB memory, 10 GiB disk"}},
		{"full", func(n *store.Node) { n.Committed = store.NodeResources{MilliCPU: 7500} }, nil,
			nil, Full, errdefs.ErrResourceExhausted, []string{"1 without free room for 1000m CPU, 2 GiB memory, 10 GiB disk"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := base
			if c.req != nil {
				c.req(&req)
			}
			// The node that fails the constraint, next to one that passes
			// it: the good one is chosen, the bad one excluded for c.reason.
			bad, good := node("bad"), node("good")
			if c.mut != nil {
				c.mut(&bad)
			}
			if c.good != nil {
				c.good(&good)
			}
			d, err := Place([]store.Node{bad, good}, t0, req, seeded())
			if err != nil {
				t.Fatalf("with a good node: %v", err)
			}
			if d.Node.Name != "good" || len(d.Candidates) != 1 {
				t.Fatalf("chose %q among %+v, want good alone", d.Node.Name, d.Candidates)
			}
			if len(d.Excluded) != 1 || d.Excluded[0].Node != "bad" || len(d.Excluded[0].Reasons) != 1 || d.Excluded[0].Reasons[0] != c.reason {
				t.Fatalf("excluded %+v, want bad for %s only", d.Excluded, c.reason)
			}
			// The bad node alone: an error of the kind that tells the user
			// what to do, naming the constraint with its count.
			_, err = Place([]store.Node{bad}, t0, req, seeded())
			if err == nil {
				t.Fatal("placed on a node that fails the constraint")
			}
			if k := kindOf(err); k != c.kind {
				t.Fatalf("kind %v, want %v: %v", k, c.kind, err)
			}
			for _, p := range c.msgParts {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("message %q lacks %q", err, p)
				}
			}
		})
	}
}

func TestStalenessBound(t *testing.T) {
	req := Request{Resources: small}
	for _, c := range []struct {
		name  string
		hb    time.Time
		bound time.Duration
		alive bool
	}{
		{"exactly at the bound", t0.Add(-DefaultStaleness), 0, true},
		{"just past it", t0.Add(-DefaultStaleness - time.Millisecond), 0, false},
		{"a heartbeat ahead of now", t0.Add(time.Second), 0, true},
		{"a custom bound", t0.Add(-3 * time.Second), 2 * time.Second, false},
		{"within a custom bound", t0.Add(-3 * time.Second), 5 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Place([]store.Node{node("n", func(n *store.Node) { n.Heartbeat = c.hb })}, t0, req, Options{Staleness: c.bound})
			if got := err == nil; got != c.alive {
				t.Fatalf("alive = %v, want %v (%v)", got, c.alive, err)
			}
		})
	}
}

func TestNoNodeErrors(t *testing.T) {
	req := Request{Resources: small, Selector: map[string]string{"pool": "gpu"}}
	gpu := func(n *store.Node) { n.Labels = map[string]string{"pool": "gpu"} }
	stale := func(n *store.Node) { n.Heartbeat = t0.Add(-time.Minute) }
	full := func(n *store.Node) { n.Committed = n.Capacity }
	cases := []struct {
		name  string
		nodes []store.Node
		kind  error
		parts []string
	}{
		{"empty cluster", nil, errdefs.ErrUnavailable, []string{"the cluster has no nodes"}},
		// The only gpu node is down; the live ones could never take it:
		// come back later, not "your request is impossible".
		{"the only matching node is stale", []store.Node{node("g1", gpu, stale), node("s1"), node("s2")},
			errdefs.ErrUnavailable, []string{"of 3 nodes: 1 stale (no heartbeat for 10s); 2 without labels pool=gpu"}},
		{"matching nodes are full, others stale", []store.Node{node("g1", gpu, full), node("g2", gpu, full, stale), node("s1", stale)},
			errdefs.ErrResourceExhausted, []string{"of 3 nodes: 2 stale", "1 without labels pool=gpu", "2 without free room"}},
		{"no node has the label", []store.Node{node("s1"), node("s2", stale)},
			errdefs.ErrInvalidArgument, []string{"of 2 nodes: 1 stale", "2 without labels pool=gpu"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Place(c.nodes, t0, req, seeded())
			if k := kindOf(err); k != c.kind {
				t.Fatalf("kind %v, want %v: %v", k, c.kind, err)
			}
			for _, p := range c.parts {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("message %q lacks %q", err, p)
				}
			}
		})
	}
	if _, err := Place([]store.Node{node("n")}, t0, Request{Resources: store.NodeResources{MilliCPU: -1}}, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative resources: %v, want invalid argument", err)
	}
}

// chain is a three-layer snapshot chain of 1.1 GiB, cached on n3 only.
var chain = []Layer{{"base", 800 << 20}, {"mid", 300 << 20}, {"top", 26 << 20}}

func withChain(n *store.Node) {
	for _, l := range chain {
		n.Layers[l.Digest] = l.Bytes
	}
}

// localityCluster: three nodes with the image, n3 the busiest but the only
// one with the snapshot chain (and room for one more).
func localityCluster() []store.Node {
	busy := func(n *store.Node) {
		n.Committed = store.NodeResources{MilliCPU: 6000, MemoryBytes: 12 * gib, DiskBytes: 60 * gib}
		n.InFlight = 1
	}
	return []store.Node{node("n1"), node("n2"), node("n3", busy, withChain)}
}

func TestLocalityBeatsSpreading(t *testing.T) {
	req := Request{Resources: small, Image: imgA, Chain: chain}
	d, err := Place(localityCluster(), t0, req, seeded())
	if err != nil {
		t.Fatal(err)
	}
	if d.Node.Name != "n3" {
		t.Fatalf("chose %s, want n3 (the only node with the chain): %+v", d.Node.Name, d.Candidates)
	}
	top := d.Candidates[0]
	if top.Node != "n3" || top.Terms.Chain != 1 || top.Terms.Image != 1 || d.NearBest != 1 {
		t.Fatalf("explanation %+v (near best %d), want n3 first with chain 1, image 1, alone within the margin", top, d.NearBest)
	}
	for _, c := range d.Candidates[1:] {
		if c.Terms.Chain != 0 || c.Terms.Free <= top.Terms.Free {
			t.Errorf("%s terms %+v: want no chain and more free than n3", c.Node, c.Terms)
		}
	}
}

func TestLocalityFallsBackWhenFull(t *testing.T) {
	nodes := localityCluster()
	nodes[2].Committed = store.NodeResources{MilliCPU: 7500, MemoryBytes: 12 * gib}
	d, err := Place(nodes, t0, Request{Resources: small, Image: imgA, Chain: chain}, seeded())
	if err != nil {
		t.Fatal(err)
	}
	if d.Node.Name == "n3" || d.Node.Name == "" {
		t.Fatalf("chose %q, want n1 or n2 (n3 is full)", d.Node.Name)
	}
	if len(d.Excluded) != 1 || d.Excluded[0].Node != "n3" || d.Excluded[0].Reasons[0] != Full {
		t.Fatalf("excluded %+v, want n3 as full", d.Excluded)
	}
}

// TestLocalityNegativeControl: the locality test above can fail. With the
// chain's weight at 0 the same cluster sends the sandbox elsewhere.
func TestLocalityNegativeControl(t *testing.T) {
	req := Request{Resources: small, Image: imgA, Chain: chain}
	with, err := Place(localityCluster(), t0, req, seeded())
	if err != nil {
		t.Fatal(err)
	}
	w := DefaultWeights()
	w.Chain = 0
	opts := seeded()
	opts.Weights = &w
	without, err := Place(localityCluster(), t0, req, opts)
	if err != nil {
		t.Fatal(err)
	}
	if with.Node.Name != "n3" || without.Node.Name == "n3" {
		t.Fatalf("with locality: %s, without: %s; want n3, then another node", with.Node.Name, without.Node.Name)
	}
}

func TestChainShareIsByBytes(t *testing.T) {
	// n1 holds the big base layer (800 of 1126 MiB), n2 the two small
	// ones: two layers of three, but 29% of the bytes.
	n1 := node("n1", func(n *store.Node) { n.Layers["base"] = 1 })
	n2 := node("n2", func(n *store.Node) { n.Layers["mid"], n.Layers["top"] = 1, 1 })
	d, err := Place([]store.Node{n1, n2}, t0, Request{Resources: small, Image: imgA, Chain: chain}, seeded())
	if err != nil {
		t.Fatal(err)
	}
	if d.Node.Name != "n1" {
		t.Fatalf("chose %s, want n1: %+v", d.Node.Name, d.Candidates)
	}
	if got, want := d.Candidates[0].Terms.Chain, 800.0/1126; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("n1's chain share %v, want %v", got, want)
	}
}

func TestImageHeldWins(t *testing.T) {
	n1 := node("n1", func(n *store.Node) { n.Images = nil })
	n2 := node("n2", func(n *store.Node) { n.Committed = store.NodeResources{MilliCPU: 5000, MemoryBytes: 10 * gib} })
	d, err := Place([]store.Node{n1, n2}, t0, Request{Resources: small, Image: imgA}, seeded())
	if err != nil || d.Node.Name != "n2" {
		t.Fatalf("chose %q (%v), want n2, the busier node that holds the image", d.Node.Name, err)
	}
}

// burst places 30 creates over three equal nodes, adding each to its
// node's InFlight before the next decision, and counts the placements.
func burst(t *testing.T, opts Options) map[string]int {
	t.Helper()
	nodes := []store.Node{node("n1"), node("n2"), node("n3")}
	got := map[string]int{}
	for range 30 {
		d, err := Place(nodes, t0, Request{Resources: small, Image: imgA}, opts)
		if err != nil {
			t.Fatal(err)
		}
		got[d.Node.Name]++
		for i := range nodes {
			if nodes[i].Name == d.Node.Name {
				nodes[i].InFlight++
			}
		}
	}
	return got
}

func TestAntiHerding(t *testing.T) {
	got := burst(t, seeded())
	for _, n := range []string{"n1", "n2", "n3"} {
		if got[n] != 10 {
			t.Fatalf("burst spread %v, want 10 on each node", got)
		}
	}
	// Negative control: without the in-flight term and the random spread
	// the same burst herds onto one node.
	w := DefaultWeights()
	w.InFlight = 0
	herd := burst(t, Options{Weights: &w, Margin: -1})
	if herd["n1"] != 30 {
		t.Fatalf("without anti-herding: %v, want all 30 on n1", herd)
	}
}

func TestSpreadOnlyAmongNearBest(t *testing.T) {
	// a and b differ by 2% free capacity (inside the 0.05 margin), c by
	// 10% (outside it).
	used := func(milli int64) func(*store.Node) {
		return func(n *store.Node) { n.Committed = store.NodeResources{MilliCPU: milli} }
	}
	nodes := []store.Node{node("a"), node("b", used(160)), node("c", used(800))}
	req := Request{Resources: store.NodeResources{MilliCPU: 100}}
	opts := seeded()
	got := map[string]int{}
	for range 1000 {
		d, err := Place(nodes, t0, req, opts)
		if err != nil {
			t.Fatal(err)
		}
		if d.NearBest != 2 {
			t.Fatalf("near best %d, want 2: %+v", d.NearBest, d.Candidates)
		}
		got[d.Node.Name]++
	}
	if got["c"] != 0 || got["a"] < 400 || got["b"] < 400 {
		t.Fatalf("picks %v: want a and b about evenly, never c", got)
	}
	// No spread: always the best.
	for range 20 {
		if d, _ := Place(nodes, t0, req, Options{Margin: -1}); d.Node.Name != "a" {
			t.Fatalf("without spread chose %s, want a", d.Node.Name)
		}
	}
}

func TestPreferredAndAffinity(t *testing.T) {
	nodes := []store.Node{
		node("n1"),
		node("n2", func(n *store.Node) { n.Labels = map[string]string{"zone": "b", "disk": "ssd"} }),
		node("n3", func(n *store.Node) { n.Labels = map[string]string{"zone": "c"} }),
	}
	pick := func(req Request) string {
		t.Helper()
		req.Resources = small
		d, err := Place(nodes, t0, req, seeded())
		if err != nil {
			t.Fatal(err)
		}
		return d.Node.Name
	}
	if got := pick(Request{Preferred: "n3"}); got != "n3" {
		t.Errorf("preferred n3: chose %s", got)
	}
	if got := pick(Request{Affinity: map[string]string{"disk": "ssd"}}); got != "n2" {
		t.Errorf("affinity disk=ssd: chose %s", got)
	}
	if got := pick(Request{AntiAffinity: map[string]string{"zone": "a"}, Affinity: map[string]string{"zone": "c"}}); got != "n3" {
		t.Errorf("anti zone=a, affinity zone=c: chose %s", got)
	}
	// A soft preference never beats a held snapshot chain.
	nodes[0].Layers = map[string]int64{"base": 1, "mid": 1, "top": 1}
	if got := pick(Request{Chain: chain, Affinity: map[string]string{"disk": "ssd"}, Preferred: "n2"}); got != "n1" {
		t.Errorf("chain on n1, affinity and preference for n2: chose %s", got)
	}
}

func TestDecisionKeepsEntries(t *testing.T) {
	nodes := []store.Node{node("n1", func(n *store.Node) { n.Addr = "https://10.0.0.1:7071" })}
	d, err := Place(nodes, t0, Request{Resources: small}, Options{})
	if err != nil || d.Node.Addr != "https://10.0.0.1:7071" {
		t.Fatalf("decision %+v, %v: want n1's entry with its address", d.Node, err)
	}
}

func TestExclusionListsAllReasons(t *testing.T) {
	n := node("n", func(n *store.Node) {
		n.Heartbeat, n.Draining, n.Isolation = t0.Add(-time.Hour), true, nil
	})
	d, err := Place([]store.Node{n, node("ok")}, t0, Request{Resources: small}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Constraint{Stale, Draining, NoIsolation}
	if len(d.Excluded) != 1 || !slices.Equal(d.Excluded[0].Reasons, want) {
		t.Fatalf("excluded %+v, want n for %v", d.Excluded, want)
	}
}

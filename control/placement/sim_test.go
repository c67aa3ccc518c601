package placement

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/postgres"
	"github.com/berth-sh/berth/store/sqlite"
)

// The simulation: simNodes node entries in a real store, each rewritten
// every simHeartbeat by a heartbeat loop, while the benchmark places
// sandboxes back to back, reading the node list from the store (direct)
// or through NodeCache (cached). It reports the decision time (p50, p99,
// reading the nodes included) and the load each side puts on the store.
const (
	simNodes = 1000
	// simHeartbeat: five beats per 10 s staleness bound, so one lost or
	// late beat never makes a node stale; 1,000 nodes then write 500
	// entries a second.
	simHeartbeat = 2 * time.Second
	// What a busy node holds: a few images and a cache of snapshot layers
	// (sha256 hex keys), which is most of an entry's bytes.
	simImages = 10
	simLayers = 100
)

// openCluster makes an empty store.Cluster for one benchmark run; the
// PostgreSQL store plugs in as one more of these.
type openCluster func(b *testing.B) store.Cluster

func openSQLite(b *testing.B) store.Cluster {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// openPostgres starts a real PostgreSQL server of the benchmark's own
// (internal/pgtest; it skips without one) and opens the cluster store on
// an empty database there.
func openPostgres(b *testing.B) store.Cluster {
	srv := pgtest.Start(b)
	s, err := postgres.Open(context.Background(), srv.NewDB(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// simStores are the store.Cluster implementations the simulation runs
// against.
var simStores = []struct {
	name string
	open openCluster
}{
	{"sqlite", openSQLite},
	{"postgres", openPostgres},
}

func BenchmarkPlacementSim(b *testing.B) {
	for _, s := range simStores {
		for _, cached := range []bool{false, true} {
			mode := "direct"
			if cached {
				mode = "cached"
			}
			b.Run(s.name+"/"+mode, func(b *testing.B) { simulate(b, s.open, cached) })
		}
	}
}

// counting counts the calls (one query each at this interface; a store
// may send more than one statement for one call) and the node rows each
// side moves.
type counting struct {
	store.Cluster
	puts, putRows     atomic.Int64 // heartbeats
	lists, listRows   atomic.Int64 // placement: Nodes
	nows              atomic.Int64 // placement: Now
	putNanos, putMaxN atomic.Int64
}

func (c *counting) PutNode(ctx context.Context, n store.Node) (store.Node, error) {
	start := time.Now()
	out, err := c.Cluster.PutNode(ctx, n)
	d := time.Since(start).Nanoseconds()
	c.putNanos.Add(d)
	for {
		m := c.putMaxN.Load()
		if d <= m || c.putMaxN.CompareAndSwap(m, d) {
			break
		}
	}
	c.puts.Add(1)
	if err == nil {
		c.putRows.Add(1)
	}
	return out, err
}

func (c *counting) Nodes(ctx context.Context) ([]store.Node, error) {
	out, err := c.Cluster.Nodes(ctx)
	c.lists.Add(1)
	c.listRows.Add(int64(len(out)))
	return out, err
}

func (c *counting) Now(ctx context.Context) (time.Time, error) {
	c.nows.Add(1)
	return c.Cluster.Now(ctx)
}

func hexOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// simNode is node i's entry as it heartbeats it. Images and layers are
// drawn from pools so that some nodes share what others hold; the chain
// the placements ask for is on every 100th node.
func simNode(i int, rng *rand.Rand) store.Node { return simNodeLayers(i, rng, simLayers) }

func simNodeLayers(i int, rng *rand.Rand, layers int) store.Node {
	n := store.Node{
		Name:      fmt.Sprintf("node-%04d", i),
		Addr:      fmt.Sprintf("https://10.%d.%d.%d:7071", i/65536, i/256%256, i%256),
		Roles:     []string{"control", "node"},
		Capacity:  store.NodeResources{MilliCPU: 64000, MemoryBytes: 256 << 30, DiskBytes: 2 << 40},
		InFlight:  rng.IntN(3),
		Isolation: []string{api.IsolationRunc, api.IsolationGVisor},
		Labels:    map[string]string{"zone": fmt.Sprintf("z%d", i%3), "pool": []string{"shared", "gpu", "acme"}[i%3]},
		Layers:    make(map[string]int64, layers),
		StartedAt: time.Unix(1700000000, 0).UTC(),
	}
	used := rng.Int64N(48000)
	n.Committed = store.NodeResources{MilliCPU: used, MemoryBytes: used << 22, DiskBytes: used << 24}
	for j := range simImages {
		n.Images = append(n.Images, "sha256:"+hexOf(fmt.Sprint("image", (i+j*7)%50)))
	}
	for j := range layers {
		n.Layers[hexOf(fmt.Sprint("layer", (i*31+j)%20000))] = 1<<20 + int64(j)<<16
	}
	if i%100 == 0 {
		for _, l := range simChain {
			n.Layers[l.Digest] = l.Bytes
		}
	}
	return n
}

var simChain = []Layer{
	{hexOf("chain-base"), 700 << 20}, {hexOf("chain-mid"), 200 << 20}, {hexOf("chain-top"), 40 << 20},
}

func simulate(b *testing.B, open openCluster, cached bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &counting{Cluster: open(b)}
	rng := rand.New(rand.NewPCG(7, 7))
	entries := make([]store.Node, simNodes)
	for i := range entries {
		entries[i] = simNode(i, rng)
		if _, err := c.PutNode(ctx, entries[i]); err != nil {
			b.Fatal(err)
		}
	}
	c.puts.Store(0)
	c.putRows.Store(0)
	c.putNanos.Store(0)
	c.putMaxN.Store(0)

	// Heartbeats: four loops, each rewriting its quarter of the nodes so
	// that every node beats once per simHeartbeat.
	const loops = 4
	var wg sync.WaitGroup
	for w := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := entries[w*simNodes/loops : (w+1)*simNodes/loops]
			r := rand.New(rand.NewPCG(uint64(w), 1))
			tick := time.NewTicker(simHeartbeat / time.Duration(len(mine)))
			defer tick.Stop()
			for k := 0; ; k = (k + 1) % len(mine) {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				n := mine[k]
				n.InFlight = r.IntN(3)
				if _, err := c.PutNode(ctx, n); err != nil && ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		}()
	}

	req := Request{
		Resources: store.NodeResources{MilliCPU: 2000, MemoryBytes: 4 << 30, DiskBytes: 20 << 30},
		Image:     "sha256:" + hexOf("image7"),
		Chain:     simChain,
		Selector:  map[string]string{"pool": "shared"},
	}
	cache := NewNodeCache(c, 0)
	opts := Options{Rand: rand.New(rand.NewPCG(3, 4))}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t := time.Now()
		var nodes []store.Node
		var now time.Time
		var err error
		if cached {
			nodes, now, err = cache.Nodes(ctx)
		} else {
			if nodes, err = c.Nodes(ctx); err == nil {
				now, err = c.Now(ctx)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		d, err := Place(nodes, now, req, opts)
		if err != nil {
			b.Fatal(err)
		}
		if cached {
			cache.Placed(d.Node.Name, req.Resources)
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()

	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	sec := elapsed.Seconds()
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(c.puts.Load())/sec, "hb-queries/s")
	b.ReportMetric(float64(c.putRows.Load())/sec, "hb-rows/s")
	if n := c.puts.Load(); n > 0 {
		b.ReportMetric(float64(c.putNanos.Load())/float64(n)/1e6, "hb-mean-ms")
		b.ReportMetric(float64(c.putMaxN.Load())/1e6, "hb-max-ms")
	}
	b.ReportMetric(float64(c.lists.Load()+c.nows.Load())/sec, "place-queries/s")
	b.ReportMetric(float64(c.listRows.Load())/sec, "place-rows/s")
	b.ReportMetric(float64(c.listRows.Load())/float64(b.N), "rows/placement")
	b.ReportMetric(float64(b.N)/sec, "placements/s")
}

// BenchmarkPlace is the decision alone over 1,000 entries in memory: what
// Place costs without reading the nodes.
func BenchmarkPlace(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 7))
	nodes := make([]store.Node, simNodes)
	for i := range nodes {
		nodes[i] = simNode(i, rng)
		nodes[i].Heartbeat = t0
	}
	req := Request{
		Resources: store.NodeResources{MilliCPU: 2000, MemoryBytes: 4 << 30, DiskBytes: 20 << 30},
		Image:     "sha256:" + hexOf("image7"),
		Chain:     simChain,
		Selector:  map[string]string{"pool": "shared"},
	}
	opts := Options{Rand: rand.New(rand.NewPCG(3, 4))}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Place(nodes, t0, req, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNodesRead is one Cluster.Nodes of 1,000 simulated entries with
// nothing else running: the read that NodeCache saves each decision; with
// no layer cache in the entries, to show what the layer maps cost.
func BenchmarkNodesRead(b *testing.B) {
	for _, s := range simStores {
		for _, layers := range []int{simLayers, 0} {
			b.Run(fmt.Sprintf("%s/layers=%d", s.name, layers), func(b *testing.B) {
				ctx := context.Background()
				c := s.open(b)
				rng := rand.New(rand.NewPCG(7, 7))
				for i := range simNodes {
					if _, err := c.PutNode(ctx, simNodeLayers(i, rng, layers)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					nodes, err := c.Nodes(ctx)
					if err != nil || len(nodes) != simNodes {
						b.Fatalf("%d nodes, %v", len(nodes), err)
					}
				}
			})
		}
	}
}

package placement

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

// listSource is a node list in memory that counts its reads; gate, when
// set, holds every Nodes call until it is closed.
type listSource struct {
	mu        sync.Mutex
	nodes     []store.Node
	now       time.Time
	err       error
	nodeReads atomic.Int64
	gate      chan struct{}
	onNodes   func() // runs inside every Nodes call
}

func (s *listSource) Nodes(ctx context.Context) ([]store.Node, error) {
	s.nodeReads.Add(1)
	if s.gate != nil {
		<-s.gate
	}
	if s.onNodes != nil {
		s.onNodes()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return append([]store.Node(nil), s.nodes...), nil
}

func (s *listSource) GetNode(_ context.Context, name string) (store.Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return store.Node{}, errdefs.NotFound("node %q", name)
}

func (s *listSource) Now(context.Context) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now, nil
}

// waitRefresh waits until src saw reads reads and no refresh is running.
func waitRefresh(t *testing.T, c *NodeCache, src *listSource, reads int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		idle := c.refreshing == nil
		c.mu.Unlock()
		if idle && src.nodeReads.Load() >= reads {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no background refresh: %d reads", src.nodeReads.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// fakeClock is the cache's local clock, moved by the test.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestCache(src Source, maxAge time.Duration) (*NodeCache, *fakeClock) {
	clk := &fakeClock{t: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := NewNodeCache(src, maxAge)
	c.clock = clk.now
	return c, clk
}

func TestNodeCacheAge(t *testing.T) {
	ctx := context.Background()
	src := &listSource{nodes: []store.Node{node("n1")}, now: t0}
	c, clk := newTestCache(src, time.Second)
	for range 5 {
		if _, _, err := c.Nodes(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := src.nodeReads.Load(); got != 1 {
		t.Fatalf("%d reads within the max age, want 1", got)
	}
	// The store's now advances on the local clock between reads.
	clk.t = clk.t.Add(400 * time.Millisecond)
	if _, now, _ := c.Nodes(ctx); !now.Equal(t0.Add(400 * time.Millisecond)) {
		t.Fatalf("now %v, want t0+400ms", now)
	}
	clk.t = clk.t.Add(600 * time.Millisecond)
	src.mu.Lock()
	src.nodes = append(src.nodes, node("n2"))
	src.now = t0.Add(5 * time.Second)
	src.mu.Unlock()
	// Past the max age: the old list still answers at once, while a read
	// runs behind; the next call sees its result.
	if nodes, _, err := c.Nodes(ctx); err != nil || len(nodes) != 1 {
		t.Fatalf("aged list: %d nodes, %v; want the old one at once", len(nodes), err)
	}
	waitRefresh(t, c, src, 2)
	nodes, now, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 2 || !now.Equal(t0.Add(5*time.Second)) || src.nodeReads.Load() != 2 {
		t.Fatalf("after the refresh: %d nodes, now %v, %d reads, %v; want the fresh read", len(nodes), now, src.nodeReads.Load(), err)
	}
	// Past 3×MaxAge the list is not served: the caller waits for a read.
	clk.t = clk.t.Add(3 * time.Second)
	src.mu.Lock()
	src.nodes = src.nodes[:1]
	src.mu.Unlock()
	if nodes, _, err := c.Nodes(ctx); err != nil || len(nodes) != 1 || src.nodeReads.Load() != 3 {
		t.Fatalf("too old: %d nodes, %d reads, %v; want a read in the call", len(nodes), src.nodeReads.Load(), err)
	}
	c.Invalidate()
	if _, _, _ = c.Nodes(ctx); src.nodeReads.Load() != 4 {
		t.Fatalf("Invalidate did not force a read")
	}
}

func TestNodeCachePlaced(t *testing.T) {
	ctx := context.Background()
	src := &listSource{nodes: []store.Node{node("n1"), node("n2")}, now: t0}
	c, clk := newTestCache(src, time.Second)
	if _, _, err := c.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(10 * time.Millisecond)
	c.Placed("n1", small)
	c.Placed("n1", small)
	nodes, _, _ := c.Nodes(ctx)
	if nodes[0].InFlight != 2 || nodes[0].Committed.MemoryBytes != 4*gib || nodes[1].InFlight != 0 {
		t.Fatalf("after two placements on n1: %+v / %+v", nodes[0], nodes[1])
	}
	// A fresh read where n1 has not heartbeaten since: still counted.
	clk.t = clk.t.Add(time.Second)
	src.mu.Lock()
	src.now = t0.Add(time.Second)
	src.mu.Unlock()
	c.Invalidate()
	nodes, _, _ = c.Nodes(ctx)
	if src.nodeReads.Load() != 2 || nodes[0].InFlight != 2 {
		t.Fatalf("n1 unreported after a re-read: InFlight %d (reads %d), want 2", nodes[0].InFlight, src.nodeReads.Load())
	}
	// n1 heartbeats (reporting them itself): the correction goes.
	clk.t = clk.t.Add(time.Second)
	src.mu.Lock()
	src.nodes[0].Heartbeat, src.nodes[0].InFlight = t0.Add(1500*time.Millisecond), 2
	src.now = t0.Add(2 * time.Second)
	src.mu.Unlock()
	c.Invalidate()
	nodes, _, _ = c.Nodes(ctx)
	if nodes[0].InFlight != 2 || nodes[0].Committed.MemoryBytes != 0 {
		t.Fatalf("after n1 reported: %+v, want its own InFlight 2 and no double count", nodes[0])
	}
	if len(c.pending) != 0 {
		t.Fatalf("%d placements still pending", len(c.pending))
	}
	// The copy is the caller's: changing it leaves the cache alone.
	nodes[1].InFlight = 99
	if again, _, _ := c.Nodes(ctx); again[1].InFlight != 0 {
		t.Fatal("a caller's change leaked into the cache")
	}
}

// TestNodeCacheBurst: a burst of 30 through the cache with no heartbeat in
// between spreads over three nodes, and without Placed it herds.
func TestNodeCacheBurst(t *testing.T) {
	ctx := context.Background()
	req := Request{Resources: store.NodeResources{MilliCPU: 500, MemoryBytes: gib, DiskBytes: 5 * gib}, Image: imgA}
	for _, record := range []bool{true, false} {
		src := &listSource{nodes: []store.Node{node("n1"), node("n2"), node("n3")}, now: t0}
		c, clk := newTestCache(src, time.Second)
		got := map[string]int{}
		for range 30 {
			clk.t = clk.t.Add(time.Millisecond)
			nodes, now, err := c.Nodes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Place(nodes, now, req, Options{Margin: -1})
			if err != nil {
				t.Fatal(err)
			}
			got[d.Node.Name]++
			if record {
				c.Placed(d.Node.Name, req.Resources)
			}
		}
		if record && (got["n1"] != 10 || got["n2"] != 10 || got["n3"] != 10) {
			t.Fatalf("with Placed: %v, want 10 each", got)
		}
		if !record && got["n1"] != 30 {
			t.Fatalf("without Placed: %v, want the herd on n1 (negative control)", got)
		}
	}
}

func TestNodeCacheOneReadAtATime(t *testing.T) {
	src := &listSource{nodes: []store.Node{node("n1")}, now: t0, gate: make(chan struct{})}
	c := NewNodeCache(src, time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes, _, err := c.Nodes(context.Background())
			if err == nil && len(nodes) != 1 {
				err = errors.New("wrong node list")
			}
			errs <- err
		}()
	}
	for src.nodeReads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the others queue behind the read
	close(src.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := src.nodeReads.Load(); got != 1 {
		t.Fatalf("%d concurrent reads, want 1", got)
	}
}

// TestNodeCacheSlowRead: a read that takes longer than the age bound is
// still served to the caller that waited for it, and its age counts from
// when it was sent.
func TestNodeCacheSlowRead(t *testing.T) {
	src := &listSource{nodes: []store.Node{node("n1")}, now: t0}
	c, clk := newTestCache(src, time.Second)
	src.onNodes = func() { clk.t = clk.t.Add(5 * time.Second) }
	if nodes, _, err := c.Nodes(context.Background()); err != nil || len(nodes) != 1 || src.nodeReads.Load() != 1 {
		t.Fatalf("slow read: %d nodes, %d reads, %v; want its result once", len(nodes), src.nodeReads.Load(), err)
	}
	src.onNodes = nil
	// Already 5 s old (sent before the read's 5 s): the next call reads.
	if _, _, err := c.Nodes(context.Background()); err != nil || src.nodeReads.Load() != 2 {
		t.Fatalf("after a slow read: %d reads, %v; want a new read", src.nodeReads.Load(), err)
	}
}

func TestNodeCacheError(t *testing.T) {
	cause := errors.New("connection refused")
	src := &listSource{err: cause}
	c := NewNodeCache(src, time.Second)
	_, _, err := c.Nodes(context.Background())
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) || !errors.Is(err, cause) {
		t.Fatalf("err %v: want unavailable wrapping the cause", err)
	}
	src.mu.Lock()
	src.err, src.nodes = nil, []store.Node{node("n1")}
	src.mu.Unlock()
	if nodes, _, err := c.Nodes(context.Background()); err != nil || len(nodes) != 1 {
		t.Fatalf("after the store came back: %v, %v", nodes, err)
	}
}

// TestNodeCacheOnSQLite runs the cache over the real SQLite store: a
// placement counts until its node's next heartbeat, which replaces it.
func TestNodeCacheOnSQLite(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{"n1", "n2"} {
		if _, err := s.PutNode(ctx, node(name)); err != nil {
			t.Fatal(err)
		}
	}
	c := NewNodeCache(s, time.Hour)
	nodes, now, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("%d nodes, %v", len(nodes), err)
	}
	d, err := Place(nodes, now, Request{Resources: small, Image: imgA}, Options{Margin: -1})
	if err != nil || d.Node.Name != "n1" {
		t.Fatalf("placed on %q, %v; want n1", d.Node.Name, err)
	}
	time.Sleep(5 * time.Millisecond) // the store keeps milliseconds
	c.Placed("n1", small)
	nodes, now, _ = c.Nodes(ctx)
	if nodes[0].InFlight != 1 {
		t.Fatalf("n1 InFlight %d after Placed, want 1", nodes[0].InFlight)
	}
	if d, _ := Place(nodes, now, Request{Resources: small, Image: imgA}, Options{Margin: -1}); d.Node.Name != "n2" {
		t.Fatalf("second placement on %q, want n2 (n1 has one in flight)", d.Node.Name)
	}
	time.Sleep(5 * time.Millisecond)
	reported := node("n1", func(n *store.Node) { n.InFlight = 1 })
	if _, err := s.PutNode(ctx, reported); err != nil {
		t.Fatal(err)
	}
	c.Invalidate()
	nodes, _, _ = c.Nodes(ctx)
	if nodes[0].InFlight != 1 || nodes[0].Committed != (store.NodeResources{}) {
		t.Fatalf("after n1's heartbeat: %+v, want its own report and no correction on top", nodes[0])
	}
}

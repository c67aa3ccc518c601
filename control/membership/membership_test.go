package membership

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

// fakeNode reports a fixed Info, or err.
type fakeNode struct {
	mu   sync.Mutex
	info node.Info
	err  error
}

func (f *fakeNode) Info(context.Context) (node.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info, f.err
}

func (f *fakeNode) set(in node.Info, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.info, f.err = in, err
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var sampleInfo = node.Info{
	ID: "local",
	Capacity: node.Capacity{VCPU: 2, MemoryMiB: 4096, DiskMB: 64000, Sandboxes: 1, UsedVCPU: 0.5,
		UsedMemoryMiB: 1024, UsedDiskMB: 8000, InFlight: 2},
	Images:             []string{"sha256:base"},
	SnapshotLayers:     []string{"sha256:aa", "sha256:bb"},
	SnapshotLayerBytes: map[string]int64{"sha256:aa": 4096},
	Isolation:          []string{api.IsolationRunc, api.IsolationGVisor},
}

// logs collects Logf lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestBeatWritesTheEntry: the first heartbeat makes an entry at epoch 1
// with the node's report in store units and the process's own part.
func TestBeatWritesTheEntry(t *testing.T) {
	st := openStore(t)
	fn := &fakeNode{info: sampleInfo}
	started := time.Now().Add(-time.Minute)
	l, err := New(st, fn, Config{Name: "n1", Addr: "http://10.0.0.1:7071", Labels: map[string]string{"zone": "a"},
		Roles: []string{api.RoleNode}, StartedAt: started})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := st.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := store.NodeResources{MilliCPU: 2000, MemoryBytes: 4096 << 20, DiskBytes: 64000 * 1000 * 1000}
	if n.Epoch != 1 || n.Capacity != want || n.Addr != "http://10.0.0.1:7071" || n.Labels["zone"] != "a" ||
		len(n.Roles) != 1 || n.Roles[0] != api.RoleNode || !n.StartedAt.Equal(started) {
		t.Fatalf("entry %+v", n)
	}
	if c := n.Committed; c.MilliCPU != 500 || c.MemoryBytes != 1024<<20 || c.DiskBytes != 8000*1000*1000 || n.InFlight != 2 {
		t.Fatalf("committed %+v, in flight %d", c, n.InFlight)
	}
	if len(n.Images) != 1 || n.Images[0] != "sha256:base" || len(n.Isolation) != 2 {
		t.Fatalf("images %v isolation %v", n.Images, n.Isolation)
	}
	// Layers are keyed by bare hex; one whose size is unknown is held at 0.
	if len(n.Layers) != 2 || n.Layers["aa"] != 4096 || n.Layers["bb"] != 0 {
		t.Fatalf("layers %v", n.Layers)
	}
	// Defaults: both roles.
	l2, err := New(st, fn, Config{Name: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l2.Beat(ctx); err != nil || strings.Join(n.Roles, ",") != "control,node" {
		t.Fatalf("default roles: %v %v", n.Roles, err)
	}
}

// TestHeartbeatAdvancesAndKeepsDraining: later beats move the heartbeat,
// keep the epoch and leave draining as set; a restart is a new epoch.
func TestHeartbeatAdvancesAndKeepsDraining(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	fn := &fakeNode{info: sampleInfo}
	l, err := New(st, fn, Config{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.Beat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetNodeDraining(ctx, "n1", true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the store's clock has millisecond steps
	second, err := l.Beat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Heartbeat.After(first.Heartbeat) || second.Epoch != 1 || !second.Draining {
		t.Fatalf("second beat %+v after %+v", second, first)
	}
	restarted, err := New(st, fn, Config{Name: "n1", StartedAt: time.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	third, err := restarted.Beat(ctx)
	if err != nil || third.Epoch != 2 || !third.Draining {
		t.Fatalf("after a restart: %+v %v", third, err)
	}
}

// flaky fails PutNode while failing is set.
type flaky struct {
	store.Cluster
	mu      sync.Mutex
	failing bool
}

func (f *flaky) PutNode(ctx context.Context, n store.Node) (store.Node, error) {
	f.mu.Lock()
	failing := f.failing
	f.mu.Unlock()
	if failing {
		return store.Node{}, errors.New("database is gone")
	}
	return f.Cluster.PutNode(ctx, n)
}

func (f *flaky) set(failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = failing
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFailingStoreIsRetriedAndLogged: a store that fails is retried (the
// loop keeps running), failures are logged with backoff (not one line
// per try), and the recovery is logged and the entry written again.
func TestFailingStoreIsRetriedAndLogged(t *testing.T) {
	st := openStore(t)
	fl := &flaky{Cluster: st, failing: true}
	var lg logs
	l, err := New(fl, &fakeNode{info: sampleInfo}, Config{Name: "n1", Interval: 50 * time.Millisecond, Stale: time.Second, Logf: lg.logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Start(ctx)
		<-ctx.Done()
	}()
	waitFor(t, "ten failed heartbeats", func() bool { return l.Failures() >= 10 })
	if _, err := st.GetNode(ctx, "n1"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("a failed heartbeat wrote the entry: %v", err)
	}
	failLines := 0
	for _, line := range lg.all() {
		if strings.Contains(line, "database is gone") {
			failLines++
		}
	}
	if n := l.Failures(); failLines == 0 || failLines >= n {
		t.Fatalf("%d failures logged in %d lines, want fewer lines than failures: %q", n, failLines, lg.all())
	}
	// Never written: SinceWritten counts from the start and keeps growing.
	s1 := l.SinceWritten()
	time.Sleep(20 * time.Millisecond)
	if s2 := l.SinceWritten(); s2 <= s1 {
		t.Fatalf("SinceWritten while failing: %s then %s, want growing", s1, s2)
	}
	fl.set(false)
	waitFor(t, "the entry after recovery", func() bool {
		_, err := st.GetNode(ctx, "n1")
		return err == nil && l.Failures() == 0
	})
	if d := l.SinceWritten(); d > time.Second {
		t.Fatalf("SinceWritten after recovery: %s, want under an interval or so", d)
	}
	waitFor(t, "the recovery's log line", func() bool {
		for _, line := range lg.all() {
			if strings.Contains(line, "recovered after") {
				return true
			}
		}
		return false
	})
	cancel()
	<-done
}

// TestInfoFailureStillBeats: a node whose report fails still heartbeats,
// with its last good report.
func TestInfoFailureStillBeats(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	fn := &fakeNode{info: sampleInfo}
	l, err := New(st, fn, Config{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.Beat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fn.set(node.Info{}, errors.New("cannot list sandboxes"))
	time.Sleep(5 * time.Millisecond)
	n, err := l.Beat(ctx)
	if err == nil || !strings.Contains(err.Error(), "cannot list sandboxes") {
		t.Fatalf("the report's failure was not returned: %v", err)
	}
	if !n.Heartbeat.After(first.Heartbeat) || n.Capacity.MilliCPU != 2000 {
		t.Fatalf("beat without a report: %+v", n)
	}
}

// TestStaleDetection: with a short bound the directory reports the entry
// alive after a beat and stale once the bound has passed without one.
func TestStaleDetection(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	const stale = 100 * time.Millisecond
	l, err := New(st, &fakeNode{info: sampleInfo}, Config{Name: "n1", Interval: 20 * time.Millisecond, Stale: stale})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDirectory(st, st, "n1", stale)
	// Just beaten, the node is alive. (A machine that stalls past the
	// short bound between the beat and the read would see it stale, so
	// one of a few tries must see it alive.)
	alive := func() bool {
		for range 5 {
			if _, err := l.Beat(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := d.GetNode(ctx, "n1"); err == nil && n.Health == api.NodeAlive {
				return true
			}
		}
		return false
	}
	if !alive() {
		t.Fatal("a node just beaten is not alive")
	}
	time.Sleep(stale + 20*time.Millisecond)
	list, err := d.ListNodes(ctx)
	if err != nil || len(list.Nodes) != 1 || list.Nodes[0].Health != api.NodeStale || list.Nodes[0].HeartbeatAgeMs <= stale.Milliseconds() {
		t.Fatalf("past the bound: %+v %v", list, err)
	}
	if list.StaleAfterMs != stale.Milliseconds() {
		t.Fatalf("staleAfterMs %d", list.StaleAfterMs)
	}
	if !alive() {
		t.Fatal("beaten again, the node is still stale")
	}
}

func TestAlive(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		age  time.Duration
		want bool
	}{{0, true}, {10 * time.Second, true}, {10*time.Second + time.Millisecond, false}, {-time.Second, true}} {
		if got := Alive(now.Add(-c.age), now, 10*time.Second); got != c.want {
			t.Errorf("age %s: alive %v, want %v", c.age, got, c.want)
		}
	}
}

// TestDirectory: sandbox counts by owner (no owner: the local node),
// drain and undrain, not found and invalid names.
func TestDirectory(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	for _, name := range []string{"n1", "n2"} {
		l, err := New(st, &fakeNode{info: sampleInfo}, Config{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	recs := fakeRecords{{Name: "a", State: api.StateRunning}, {Name: "b", Owner: "n2", State: api.StateSleeping},
		{Name: "c", Owner: "n2", State: api.StateStarting}, {Name: "d", Owner: "n2", State: api.StateSleeping}, {Name: "e", Owner: "n2", State: api.StateFailed}}
	d := NewDirectory(st, recs, "n1", 0)
	list, err := d.ListNodes(ctx)
	if err != nil || len(list.Nodes) != 2 || list.Nodes[0].Sandboxes != 1 || list.Nodes[1].Sandboxes != 4 {
		t.Fatalf("list %+v %v", list, err)
	}
	// The drain's progress: what each node still owns, by state.
	if n1, n2 := list.Nodes[0], list.Nodes[1]; n1.Running != 1 || n1.Sleeping != 0 || n2.Running != 1 || n2.Sleeping != 2 {
		t.Fatalf("by state: n1 %d running %d sleeping, n2 %d running %d sleeping", n1.Running, n1.Sleeping, n2.Running, n2.Sleeping)
	}
	if n, err := d.GetNode(ctx, "n2"); err != nil || n.Running != 1 || n.Sleeping != 2 {
		t.Fatalf("get n2: %+v %v", n, err)
	}
	n := list.Nodes[0]
	if n.Capacity.MilliCPU != 2000 || n.LayerBytes != 4096 || len(n.Images) != 1 || n.Epoch != 1 || n.Health != api.NodeAlive {
		t.Fatalf("view %+v", n)
	}
	if n, err := d.SetNodeDraining(ctx, "n2", true); err != nil || !n.Draining {
		t.Fatalf("drain: %+v %v", n, err)
	}
	if n, err := d.SetNodeDraining(ctx, "n2", false); err != nil || n.Draining {
		t.Fatalf("undrain: %+v %v", n, err)
	}
	if _, err := d.GetNode(ctx, "nope"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	if _, err := d.SetNodeDraining(ctx, "nope", true); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("drain an unknown node: %v", err)
	}
	if _, err := d.GetNode(ctx, "Bad/Name"); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad name: %v", err)
	}
}

type fakeRecords []store.Sandbox

func (f fakeRecords) List(context.Context) ([]store.Sandbox, error) { return f, nil }

func TestRules(t *testing.T) {
	for _, c := range []struct {
		interval, stale time.Duration
		ok              bool
	}{{2 * time.Second, 10 * time.Second, true}, {5 * time.Second, 10 * time.Second, false}, {0, time.Second, false}, {time.Second, 0, false}} {
		if err := ValidateTiming(c.interval, c.stale); (err == nil) != c.ok {
			t.Errorf("interval %s stale %s: %v", c.interval, c.stale, err)
		}
	}
	if _, err := New(openStore(t), &fakeNode{}, Config{Name: "n1", Interval: 6 * time.Second}); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("an interval past half the default bound: %v", err)
	}
	for role, want := range map[string]string{"": "control,node", "all": "control,node", "control": "control", "node": "node"} {
		if got, err := ParseRole(role); err != nil || strings.Join(got, ",") != want {
			t.Errorf("role %q: %v %v", role, got, err)
		}
	}
	if _, err := ParseRole("worker"); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unknown role: %v", err)
	}
	if l, err := ParseLabels([]string{"zone=eu-1", "gpu=", "tier=a=b"}); err != nil || l["zone"] != "eu-1" || l["gpu"] != "" || l["tier"] != "a=b" {
		t.Fatalf("labels %v %v", l, err)
	}
	for _, bad := range [][]string{{"novalue"}, {"=x"}, {"bad key=x"}, {"k=a\nb"}, {"k=1", "k=2"}} {
		if _, err := ParseLabels(bad); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("labels %q: %v", bad, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", strings.Repeat("a", 254)} {
		if _, err := New(openStore(t), &fakeNode{}, Config{Name: bad}); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if name, err := DefaultName(); err != nil || api.ValidateNodeName(name) != nil {
		t.Fatalf("default name %q: %v", name, err)
	}
}

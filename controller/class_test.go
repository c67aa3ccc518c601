package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/store/sqlite"
)

// fakeCompute is a durable.Compute (a node.Node) with containers in memory: what a
// third-party platform would give the class. Files survive Stop, not
// Destroy.
type fakeCompute struct {
	mu    sync.Mutex
	boxes map[string]*box
	calls []string
}

type box struct {
	opts    durable.StartOptions
	running bool
	files   map[string]string
	last    time.Time
	busy    bool
}

func newFake() *fakeCompute { return &fakeCompute{boxes: map[string]*box{}} }

func (f *fakeCompute) log(c string) { f.calls = append(f.calls, c) }

func (f *fakeCompute) Start(ctx context.Context, name string, o durable.StartOptions) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("start")
	b := f.boxes[name]
	if b != nil && b.running {
		return errdefs.FailedPrecondition("already running")
	}
	if b == nil {
		b = &box{opts: o, files: map[string]string{}}
		f.boxes[name] = b
	} else {
		if o.Snapshot != nil {
			return errdefs.InvalidArgument("the fake does not restore snapshots")
		}
		if o.Isolation != "" && o.Isolation != b.opts.Isolation {
			return errdefs.FailedPrecondition("isolation is fixed")
		}
		b.opts.Instance, b.opts.Internet, b.opts.SleepAfter, b.opts.KeepAlive, b.opts.SelfSleep = o.Instance, o.Internet, o.SleepAfter, o.KeepAlive, o.SelfSleep
	}
	b.running, b.last = true, time.Now()
	return nil
}

func (f *fakeCompute) Update(ctx context.Context, name string, o durable.StartOptions) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("update")
	b := f.boxes[name]
	if b == nil {
		return errdefs.NotFound("no %s", name)
	}
	b.opts.KeepAlive, b.opts.Internet = o.KeepAlive, o.Internet
	return nil
}

func (f *fakeCompute) Status(ctx context.Context, name string) (durable.Status, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return durable.Status{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[name]
	if b == nil {
		return durable.Status{State: "destroyed"}, nil
	}
	state := api.StateSleeping
	if b.running {
		state = api.StateRunning
	}
	sb := api.Sandbox{Name: name, State: state, Image: b.opts.Image, Instance: b.opts.Instance, Internet: b.opts.Internet,
		Env: b.opts.Env, Labels: b.opts.Labels, SleepAfter: b.opts.SleepAfter.String(), KeepAlive: b.opts.KeepAlive,
		Isolation: b.opts.Isolation, LastActive: b.last}
	return durable.Status{Exists: true, Running: b.running, State: state, LastActive: b.last, Busy: b.busy, Sandbox: sb}, nil
}

func (f *fakeCompute) Stop(ctx context.Context, name string, o durable.StopOptions) (bool, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[name]
	if b == nil {
		return false, errdefs.NotFound("no %s", name)
	}
	if !b.running || !o.IdleSince.IsZero() && (b.busy || b.last.After(o.IdleSince)) {
		return false, nil
	}
	f.log("stop:" + o.Reason)
	b.running = false
	return true, nil
}

func (f *fakeCompute) Destroy(ctx context.Context, name, reason string) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("destroy")
	if f.boxes[name] == nil {
		return errdefs.NotFound("no %s", name)
	}
	delete(f.boxes, name)
	return nil
}

func (f *fakeCompute) Exec(ctx context.Context, name string, argv []string, o durable.ExecOptions) (durable.Process, error) {
	return nil, errdefs.Unavailable("no exec in the fake")
}
func (f *fakeCompute) Signal(ctx context.Context, name string, sig int) error { return nil }
func (f *fakeCompute) SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error {
	return nil
}
func (f *fakeCompute) Snapshot(ctx context.Context, name string, o durable.SnapshotOptions) (durable.SnapshotHandle, error) {
	return durable.SnapshotHandle{}, errdefs.Unavailable("no snapshots in the fake")
}
func (f *fakeCompute) Images(ctx context.Context) (map[string]string, error) { return nil, nil }

// write is a request's activity on the sandbox (exec, files).
func (f *fakeCompute) write(name, path, data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[name]
	b.files[path], b.last = data, time.Now()
}

func (f *fakeCompute) running(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boxes[name] != nil && f.boxes[name].running
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func host(t *testing.T, path string, fc *fakeCompute, c *clock) *durable.Host {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := durable.NewHost(durable.Config{Store: st, Compute: fc, Now: c.now, Logf: t.Logf})
	if err := controller.Register(h, controller.Options{Now: c.now}); err != nil {
		t.Fatal(err)
	}
	return h
}

func call(t *testing.T, h *durable.Host, method string, args, out any) error {
	t.Helper()
	var raw json.RawMessage
	if args != nil {
		raw, _ = json.Marshal(args)
	}
	res, err := h.Call(context.Background(), durable.Address{Class: controller.Class, ID: "box"}, method, raw)
	if err == nil && out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			t.Fatal(err)
		}
	}
	return err
}

func alarm(t *testing.T, h *durable.Host) (time.Time, bool) {
	t.Helper()
	st, err := h.StateOf(durable.Address{Class: controller.Class, ID: "box"})
	if err != nil {
		t.Fatal(err)
	}
	at, ok, err := st.GetAlarm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return at, ok
}

func spec(t *testing.T, h *durable.Host) (controller.Spec, bool) {
	t.Helper()
	var sp controller.Spec
	ok, err := h.Storage(durable.Address{Class: controller.Class, ID: "box"}).Get(context.Background(), controller.SpecKey, &sp)
	if err != nil {
		t.Fatal(err)
	}
	return sp, ok
}

// TestClassOnPublicAPI runs the built-in sandbox controller on a durable
// Host whose compute is a fake, so nothing but package durable's public
// API is there for it to use: create → idle alarm → sleep (Stop) → a
// request wakes it with its files → destroy, the spec read back from
// Storage at each step.
func TestClassOnPublicAPI(t *testing.T) {
	fc, c := newFake(), &clock{t: time.Now()}
	h := host(t, filepath.Join(t.TempDir(), "state.db"), fc, c)
	req := api.CreateSandboxRequest{Name: "box", Image: "debian-trixie", Instance: "standard-2", SleepAfter: "1m",
		Env: map[string]string{"A": "1"}, Labels: map[string]string{"team": "x"}, Isolation: api.IsolationRunc}
	var res controller.CreateResult
	both := api.CreateSandboxRequest{Name: "box", Image: "debian-trixie", Snapshot: "snap_1"}
	if err := call(t, h, "GetOrCreate", controller.CreateArgs{Request: both}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || len(fc.calls) != 0 {
		t.Fatalf("image and snapshot: %v (compute calls %v)", err, fc.calls)
	}
	if err := call(t, h, "GetOrCreate", controller.CreateArgs{Request: req}, &res); err != nil || !res.Created || res.Sandbox.State != api.StateRunning {
		t.Fatalf("create: %+v %v", res, err)
	}
	sp, ok := spec(t, h)
	if !ok || sp.Image != "debian-trixie" || sp.Instance != "standard-2" || sp.SleepAfter != time.Minute || sp.Env["A"] != "1" || sp.Labels["team"] != "x" || sp.Isolation != api.IsolationRunc {
		t.Fatalf("spec in Storage: %+v %v", sp, ok)
	}
	if o := fc.boxes["box"].opts; !o.SelfSleep || o.SleepAfter != time.Minute || o.Image != "debian-trixie" {
		t.Fatalf("start options: %+v", o)
	}
	at, ok := alarm(t, h)
	if d := at.Sub(fc.boxes["box"].last.Add(time.Minute)); !ok || d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("idle alarm %v %v, want lastActive+1m", at, ok)
	}
	// A second create-only is refused; a get-or-create just returns it.
	if err := call(t, h, "GetOrCreate", controller.CreateArgs{Request: req, CreateOnly: true}, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("create-only on an existing sandbox: %v", err)
	}
	// Activity moves the deadline: the due alarm re-arms, it does not stop.
	time.Sleep(5 * time.Millisecond)
	fc.write("box", "/work/a.txt", "kept")
	c.set(at.Add(time.Millisecond))
	h.FireDue(context.Background())
	if !fc.running("box") {
		t.Fatal("slept although it had activity after the alarm was set")
	}
	at2, ok := alarm(t, h)
	if !ok || !at2.After(at) {
		t.Fatalf("alarm not moved after activity: %v → %v %v", at, at2, ok)
	}
	// A duplicate (stale) delivery changes nothing.
	if err := h.DoAs(context.Background(), durable.Address{Class: controller.Class, ID: "box"}, func(obj any, _ *durable.State) error {
		return obj.(*controller.Sandbox).Alarm(context.Background(), durable.AlarmInfo{RetryCount: 1})
	}); err != nil || !fc.running("box") {
		t.Fatalf("stale delivery: %v running=%v", err, fc.running("box"))
	}
	// Idle past the deadline: the alarm stops it, keeping its files.
	c.set(at2.Add(time.Second))
	h.FireDue(context.Background())
	if fc.running("box") || fc.boxes["box"] == nil || fc.boxes["box"].files["/work/a.txt"] != "kept" {
		t.Fatalf("after the idle alarm: %+v", fc.boxes["box"])
	}
	if _, ok := alarm(t, h); ok {
		t.Fatal("a sleeping sandbox kept its alarm")
	}
	// A request wakes it: same files, a fresh alarm, the spec unchanged.
	var woke api.Sandbox
	if err := call(t, h, "Wake", nil, &woke); err != nil || woke.State != api.StateRunning || fc.boxes["box"].files["/work/a.txt"] != "kept" {
		t.Fatalf("wake: %+v %v", woke, err)
	}
	if o := fc.boxes["box"].opts; o.Snapshot != nil || !o.SelfSleep {
		t.Fatalf("wake options: %+v", o)
	}
	if _, ok := alarm(t, h); !ok {
		t.Fatal("woken sandbox has no idle alarm")
	}
	if sp2, _ := spec(t, h); sp2.Image != sp.Image || sp2.SleepAfter != sp.SleepAfter {
		t.Fatalf("spec after wake: %+v", sp2)
	}
	// Sleep on request, then destroy: the spec and alarm go with it.
	if err := call(t, h, "Sleep", nil, nil); err != nil || fc.running("box") {
		t.Fatalf("sleep: %v", err)
	}
	if err := call(t, h, "Destroy", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := spec(t, h); ok {
		t.Fatal("destroy left the spec")
	}
	if _, ok := alarm(t, h); ok {
		t.Fatal("destroy left the alarm")
	}
	if err := call(t, h, "Get", nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get after destroy: %v", err)
	}
	if err := call(t, h, "Wake", nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("wake created a destroyed sandbox: %v", err)
	}
}

// TestClassSurvivesRestart: a new Host on the same store (the daemon
// restarted) keeps the spec and delivers the idle alarm that fell due
// while it was down; a keepAlive sandbox gets no alarm.
func TestClassSurvivesRestart(t *testing.T) {
	fc, c := newFake(), &clock{t: time.Now()}
	path := filepath.Join(t.TempDir(), "state.db")
	h := host(t, path, fc, c)
	if err := call(t, h, "GetOrCreate", controller.CreateArgs{Request: api.CreateSandboxRequest{Name: "box", SleepAfter: "30s", Instance: "lite"}}, nil); err != nil {
		t.Fatal(err)
	}
	at, ok := alarm(t, h)
	if !ok {
		t.Fatal("no idle alarm")
	}
	// Restart: a new host (and class instance) on the same store, its
	// clock past the deadline that passed while it was down.
	c.set(at.Add(time.Minute))
	h2 := host(t, path, fc, c)
	if sp, ok := spec(t, h2); !ok || sp.SleepAfter != 30*time.Second || sp.Instance != "lite" {
		t.Fatalf("spec after restart: %+v %v", sp, ok)
	}
	h2.FireDue(context.Background())
	if fc.running("box") {
		t.Fatal("the due idle alarm did not sleep the sandbox after the restart")
	}
	if n := len(fc.calls); fc.calls[n-1] != "stop:idle for 30s" {
		t.Fatalf("compute calls: %v", fc.calls)
	}
	// keepAlive: no alarm while it runs.
	keep := true
	var res controller.CreateResult
	if err := call(t, h2, "GetOrCreate", controller.CreateArgs{Request: api.CreateSandboxRequest{Name: "box", KeepAlive: &keep}}, &res); err != nil || !res.Sandbox.KeepAlive {
		t.Fatalf("keepAlive: %+v %v", res, err)
	}
	if _, ok := alarm(t, h2); ok {
		t.Fatal("a keepAlive sandbox has an idle alarm")
	}
}

// TestImportsOnlyPublicAPI: the class reaches the platform only through
// package durable (and the API types and error kinds every class uses).
func TestImportsOnlyPublicAPI(t *testing.T) {
	allowed := map[string]bool{"context": true, "encoding/json": true, "time": true, "github.com/berth-sh/berth/api": true,
		"github.com/berth-sh/berth/durable": true, "github.com/berth-sh/berth/internal/errdefs": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); !allowed[p] {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

func (f *fakeCompute) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	return nil, nil, errdefs.FailedPrecondition("fake compute has no agents")
}

func (f *fakeCompute) Info(ctx context.Context) (node.Info, error) {
	return node.Info{ID: "fake", Capacity: node.Capacity{VCPU: 2, MemoryMiB: 4096}}, nil
}

// TestFakeComputeConforms: the fake these tests drive keeps the node
// contract's lifecycle (what the real node does on start, stop, destroy and
// a missing name), so the class is tested against the behaviour it meets.
func TestFakeComputeConforms(t *testing.T) {
	nodetest.Run(t, func(*testing.T) node.Node { return newFake() }, nodetest.WithoutExec())
}

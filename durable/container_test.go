package durable_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
)

// fakeCompute is a Compute with containers in a map.
type fakeCompute struct {
	mu      sync.Mutex
	running map[string]bool
	exists  map[string]bool
	last    durable.StartOptions
	exit    *int // reported once stopped
}

func (f *fakeCompute) Start(ctx context.Context, name string, o durable.StartOptions) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running[name] {
		return errdefs.FailedPrecondition("already running")
	}
	f.running[name], f.exists[name], f.last = true, true, o
	return nil
}
func (f *fakeCompute) Status(ctx context.Context, name string) (durable.Status, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return durable.Status{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := durable.Status{Exists: f.exists[name], Running: f.running[name], State: "sleeping"}
	if st.Running {
		st.State = "running"
	} else {
		st.ExitCode = f.exit
	}
	if st.Exists {
		st.Sandbox.Name, st.Sandbox.State = name, st.State
	}
	return st, nil
}
func (f *fakeCompute) Exec(ctx context.Context, name string, argv []string, o durable.ExecOptions) (durable.Process, error) {
	return nil, errdefs.Unavailable("no exec in the fake")
}
func (f *fakeCompute) Signal(ctx context.Context, name string, sig int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[name] = false
	return nil
}
func (f *fakeCompute) Stop(ctx context.Context, name string, o durable.StopOptions) (bool, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.exists[name] {
		return false, errdefs.NotFound("no such sandbox")
	}
	was := f.running[name]
	f.running[name] = false
	return was, nil
}
func (f *fakeCompute) Update(ctx context.Context, name string, o durable.StartOptions) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return nil
}
func (f *fakeCompute) Destroy(ctx context.Context, name, reason string) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.exists[name] {
		return errdefs.NotFound("no such sandbox")
	}
	delete(f.running, name)
	delete(f.exists, name)
	return nil
}
func (f *fakeCompute) SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error {
	return nil
}
func (f *fakeCompute) Snapshot(ctx context.Context, name string, o durable.SnapshotOptions) (durable.SnapshotHandle, error) {
	return durable.SnapshotHandle{ID: "snap1", Name: o.Name, BaseImageDigest: "sha256:x"}, nil
}
func (f *fakeCompute) Images(ctx context.Context) (map[string]string, error) {
	return map[string]string{"debian-trixie": "sha256:x"}, nil
}

func TestContainer(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	fc := &fakeCompute{running: map[string]bool{}, exists: map[string]bool{}}
	h := durable.NewHost(durable.Config{Store: st, Compute: fc})
	if err := h.Register("Counter", (*Counter)(nil), newCounter); err != nil {
		t.Fatal(err)
	}
	addr := durable.Address{Class: "Counter", ID: "box"}
	ctx := context.Background()
	err := h.DoAs(ctx, addr, func(_ any, s *durable.State) error {
		c := s.Container
		if !strings.HasPrefix(c.Name(), "counter-box-") {
			t.Errorf("sandbox name %q", c.Name())
		}
		if err := c.Start(ctx, durable.StartOptions{Image: "a", Snapshot: &durable.SnapshotHandle{ID: "s"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("image and snapshot: %v", err)
		}
		if err := c.Start(ctx, durable.StartOptions{Image: "debian-trixie", Env: map[string]string{"TOKEN": "s3cret"}}); err != nil {
			return err
		}
		if fc.last.Env["TOKEN"] != "s3cret" || fc.last.Labels["berth.object.class"] != "Counter" {
			t.Errorf("start options reached compute as %+v", fc.last)
		}
		if !c.Running(ctx) {
			t.Error("not running after start")
		}
		if err := c.Start(ctx, durable.StartOptions{Image: "debian-trixie"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("start while running: %v", err)
		}
		go func() { time.Sleep(100 * time.Millisecond); _ = c.Signal(ctx, 15) }()
		info, err := c.Monitor(ctx)
		if err != nil || info.Reason != "sleeping" {
			t.Errorf("monitor after signal: %+v %v", info, err)
		}
		hd, err := c.SnapshotContainer(ctx, durable.SnapshotOptions{Name: "n"})
		if err != nil || hd.ID != "snap1" {
			t.Errorf("snapshot: %+v %v", hd, err)
		}
		if err := c.Destroy(ctx, "done"); err != nil {
			return err
		}
		if err := c.Destroy(ctx, "again"); err != nil {
			t.Errorf("destroying a missing container: %v", err)
		}
		if info, _ := c.Monitor(ctx); info.Reason != "destroyed" {
			t.Errorf("monitor after destroy: %+v", info)
		}
		imgs, err := c.Images(ctx)
		if err != nil || imgs["debian-trixie"] != "sha256:x" {
			t.Errorf("images: %v %v", imgs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The journal has every lifecycle call, with the env value redacted.
	j, err := st.Journal(ctx, durable.SandboxName(addr))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range j {
		ops = append(ops, e.Op+":"+e.Status)
		if strings.Contains(e.Args, "s3cret") {
			t.Errorf("secret in the journal: %s", e.Args)
		}
	}
	want := "container.start:done,container.start:failed,container.signal:done,container.snapshot:done,container.destroy:done,container.destroy:done"
	if strings.Join(ops, ",") != want {
		t.Fatalf("journal ops:\n got %s\nwant %s", strings.Join(ops, ","), want)
	}
}

// Flaky is a class whose alarm handler fails a set number of times.
type Flaky struct {
	mu    *sync.Mutex
	fails *int
	seen  *[]int
}

func (f *Flaky) Alarm(ctx context.Context, info durable.AlarmInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.seen = append(*f.seen, info.RetryCount)
	if *f.fails > 0 {
		*f.fails--
		return io.ErrUnexpectedEOF
	}
	return nil
}

// TestAlarmRetries: a failing handler is redelivered with a growing
// RetryCount after a backoff, until it succeeds; one that keeps failing
// is dropped after MaxAlarmRetries.
func TestAlarmRetries(t *testing.T) {
	for _, c := range []struct {
		fails     int
		wantSeen  string
		wantArmed bool
	}{
		{fails: 2, wantSeen: "0,1,2"},
		{fails: 100, wantSeen: "0,1,2,3"},
	} {
		st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
		now := time.Now()
		h := durable.NewHost(durable.Config{Store: st, MaxAlarmRetries: 3, Now: func() time.Time { return now }})
		var mu sync.Mutex
		fails, seen := c.fails, []int{}
		if err := h.Register("Flaky", (*Flaky)(nil), func(*durable.State) (any, error) { return &Flaky{&mu, &fails, &seen}, nil }); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		addr := durable.Address{Class: "Flaky", ID: "f"}
		_ = h.DoAs(ctx, addr, func(_ any, s *durable.State) error { return s.SetAlarm(ctx, now) })
		for i := 0; i < 8; i++ {
			h.FireDue(ctx)
			h.FireDue(ctx) // not due again before its backoff
			now = now.Add(10 * time.Minute)
		}
		var got []string
		for _, r := range seen {
			got = append(got, string(rune('0'+r)))
		}
		if strings.Join(got, ",") != c.wantSeen {
			t.Fatalf("fails=%d: retry counts %v, want %s", c.fails, seen, c.wantSeen)
		}
		var armed bool
		_ = h.DoAs(ctx, addr, func(_ any, s *durable.State) error { _, armed, _ = s.GetAlarm(ctx); return nil })
		if armed {
			t.Fatalf("fails=%d: alarm still armed", c.fails)
		}
	}
}

// TestContainerStopAndStatus covers the calls the built-in class needs:
// Describe, Stop, StopIfIdle, Update, and Monitor's exit code.
func TestContainerStopAndStatus(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	fc := &fakeCompute{running: map[string]bool{}, exists: map[string]bool{}}
	h := durable.NewHost(durable.Config{Store: st, Compute: fc})
	if err := h.Register("Counter", (*Counter)(nil), newCounter); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := h.DoAs(ctx, durable.Address{Class: "Counter", ID: "stop"}, func(_ any, s *durable.State) error {
		c := s.Container
		if _, err := c.Describe(ctx); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("describe before start: %v", err)
		}
		if err := c.Stop(ctx, "x"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("stop of a missing container: %v", err)
		}
		if _, err := c.StopIfIdle(ctx, "x", time.Time{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("StopIfIdle without a time: %v", err)
		}
		if err := c.Update(ctx, durable.StartOptions{Snapshot: &durable.SnapshotHandle{ID: "s"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("update with a snapshot: %v", err)
		}
		if err := c.Start(ctx, durable.StartOptions{Image: "debian-trixie"}); err != nil {
			return err
		}
		if sb, err := c.Describe(ctx); err != nil || sb.State != "running" || sb.Name != c.Name() {
			t.Errorf("describe: %+v %v", sb, err)
		}
		pol := &api.NetworkPolicy{Allow: []string{"api.test"}, Inject: []api.InjectRule{{Host: "api.test", SetHeaders: map[string]string{"X-Custom": "Bearer hunter2"}}}}
		if err := c.Update(ctx, durable.StartOptions{Network: pol}); err != nil {
			return err
		}
		code := 7
		fc.exit = &code
		if err := c.Stop(ctx, "requested"); err != nil {
			return err
		}
		if info, err := c.Monitor(ctx); err != nil || info.ExitCode != 7 || info.Reason != "sleeping" {
			t.Errorf("monitor: %+v %v", info, err)
		}
		fc.exit = nil
		if info, _ := c.Monitor(ctx); info.ExitCode != -1 {
			t.Errorf("unknown exit code: %+v", info)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.Journal(ctx, durable.SandboxName(durable.Address{Class: "Counter", ID: "stop"}))
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	for _, e := range j {
		ops[e.Op]++
		if strings.Contains(e.Args, "hunter2") {
			t.Errorf("injected header value in the journal: %s", e.Args)
		}
		if e.Op == "container.update" && !strings.Contains(e.Args, "X-Custom") {
			t.Errorf("update args lost the header name: %s", e.Args)
		}
	}
	if ops["container.stop"] != 2 || ops["container.update"] != 1 || ops["container.start"] != 1 {
		t.Fatalf("journal: %v", ops)
	}
}

func (f *fakeCompute) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	return nil, nil, errdefs.FailedPrecondition("fake compute has no agents")
}

func (f *fakeCompute) Info(ctx context.Context) (node.Info, error) {
	return node.Info{ID: "fake", Capacity: node.Capacity{VCPU: 2, MemoryMiB: 4096}}, nil
}

// TestFakeComputeConforms: the fake these tests drive keeps the node
// contract's lifecycle, so Container is tested against what it meets.
func TestFakeComputeConforms(t *testing.T) {
	nodetest.Run(t, func(*testing.T) node.Node { return &fakeCompute{running: map[string]bool{}, exists: map[string]bool{}} }, nodetest.WithoutExec())
}

// Two hosts on one store (two nodes of a cluster): only the host that owns
// an object delivers its alarm, and the other neither runs it nor uses up
// its retries. Negative control: without Owns both hosts deliver.
func TestAlarmOnlyWhereOwned(t *testing.T) {
	for _, withOwns := range []bool{true, false} {
		st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
		now := time.Now()
		var mu sync.Mutex
		delivered := map[string]int{}
		host := func(name string) *durable.Host {
			cfg := durable.Config{Store: st, MaxAlarmRetries: 3, Now: func() time.Time { return now }}
			if withOwns {
				cfg.Owns = func(_ context.Context, a durable.Address) (bool, error) { return a.ID == "of-"+name, nil }
			}
			h := durable.NewHost(cfg)
			fails := 0
			seen := []int{}
			if err := h.Register("Flaky", (*Flaky)(nil), func(*durable.State) (any, error) {
				mu.Lock()
				delivered[name]++
				mu.Unlock()
				return &Flaky{&mu, &fails, &seen}, nil
			}); err != nil {
				t.Fatal(err)
			}
			return h
		}
		h1, h2 := host("h1"), host("h2")
		ctx := context.Background()
		addr := durable.Address{Class: "Flaky", ID: "of-h1"}
		_ = h1.DoAs(ctx, addr, func(_ any, s *durable.State) error { return s.SetAlarm(ctx, now) })
		mu.Lock()
		delivered = map[string]int{} // DoAs constructed it on h1
		mu.Unlock()
		h2.FireDue(ctx)
		h1.FireDue(ctx)
		var armed bool
		_ = h1.DoAs(ctx, addr, func(_ any, s *durable.State) error { _, armed, _ = s.GetAlarm(ctx); return nil })
		if withOwns && (delivered["h2"] != 0 || armed) {
			t.Fatalf("with Owns: h2 constructed the object %d times; alarm still armed: %v", delivered["h2"], armed)
		}
		if !withOwns && delivered["h2"] == 0 {
			t.Fatal("negative control: without Owns the other host did not deliver: the test cannot tell")
		}
	}
}

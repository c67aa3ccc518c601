package local

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
)

var ctx = context.Background()

func TestGetOrCreateThenExec(t *testing.T) {
	r := newRig(t)
	sb, created, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, false)
	if err != nil || !created || sb.State != api.StateRunning || sb.ImageDigest != "sha256:debian-trixie" {
		t.Fatalf("create: %+v created=%v err=%v", sb, created, err)
	}
	if sb.Instance != DefaultInstance || sb.SleepAfter != "10m0s" {
		t.Fatalf("defaults: %+v", sb)
	}
	var out bytes.Buffer
	st, err := plane(r.m).Exec(ctx, "a", api.ExecRequest{Command: "echo hi"}, &out, &out)
	if err != nil || st.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatalf("exec: %+v %q %v", st, out.String(), err)
	}
	again, created, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, false)
	if err != nil || created || again.ID != sb.ID {
		t.Fatalf("second get-or-create: %+v %v %v", again, created, err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, true); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("strict create of an existing name: %v", err)
	}
	if r.rt.creates != 1 {
		t.Fatalf("%d containers created, want 1", r.rt.creates)
	}
}

func TestValidation(t *testing.T) {
	r := newRig(t)
	bad := []api.CreateSandboxRequest{
		{Name: "../x"},
		{Name: "UPPER"},
		{Name: strings.Repeat("a", 64)},
		{Name: "ok", SleepAfter: "soon"},
		{Name: "ok", SleepAfter: "10ms"},
		{Name: "ok", Instance: "huge"},
		{Name: "ok", Resources: &api.Resources{VCPU: 64, MemoryMiB: 1024, DiskMB: 1000}},
		{Name: "ok", Resources: &api.Resources{VCPU: 1, MemoryMiB: 1 << 30, DiskMB: 1000}},
		{Name: "ok", Env: map[string]string{"A=B": "x"}},
	}
	for _, req := range bad {
		if _, _, err := plane(r.m).GetOrCreate(ctx, req, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: want invalid argument, got %v", req, err)
		}
	}
	if _, err := plane(r.m).Exec(ctx, "missing", api.ExecRequest{Command: "true"}, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("exec on missing: %v", err)
	}
	if _, err := plane(r.m).Exec(ctx, "missing", api.ExecRequest{}, nil, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("exec without a command: %v", err)
	}
}

func TestConcurrentGetOrCreateMakesOneContainer(t *testing.T) {
	r := newRig(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]int{}
	created := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, c, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "race"}, false)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids[sb.ID]++
			if c {
				created++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 || r.rt.creates != 1 {
		t.Fatalf("ids=%v created=%d containers=%d", ids, created, r.rt.creates)
	}
}

func TestSleepWakeAndJournal(t *testing.T) {
	r := newRig(t)
	sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	got, _ := plane(r.m).Get(ctx, "s")
	if got.State != api.StateSleeping || r.net.up[sb.ID] || r.rfs.mounted[sb.ID] || !r.rfs.known[sb.ID] {
		t.Fatalf("sleeping sandbox: state=%s net=%v mounted=%v upper kept=%v", got.State, r.net.up[sb.ID], r.rfs.mounted[sb.ID], r.rfs.known[sb.ID])
	}
	// Any request wakes it.
	if _, err := plane(r.m).Exec(ctx, "s", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, _ = plane(r.m).Get(ctx, "s")
	if got.State != api.StateRunning || got.ID != sb.ID {
		t.Fatalf("after wake: %+v", got)
	}
	j, err := r.cfg.Store.Journal(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range j {
		// The controller object's container.* calls interleave.
		if !strings.HasPrefix(e.Op, "container.") {
			ops = append(ops, e.Op)
		}
	}
	if strings.Join(ops, ",") != "create,start,sleep,wake" {
		t.Fatalf("journal: %v", ops)
	}
	if err := plane(r.m).Destroy(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := plane(r.m).Get(ctx, "s"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after destroy: %v", err)
	}
	if r.rfs.known[sb.ID] {
		t.Fatal("destroy kept the writable layer")
	}
}

// TestIdleAlarm: the Sandbox class's durable alarm sleeps an idle
// sandbox, not one with an operation in flight, and never a keepAlive one.
func TestIdleAlarm(t *testing.T) {
	r := newRig(t)
	keep := true
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "idle", SleepAfter: "1m"}, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "kept", SleepAfter: "1m", KeepAlive: &keep}, false); err != nil {
		t.Fatal(err)
	}
	// Not yet due; and the compute's own idle timer leaves both alone.
	r.m.tick(ctx, time.Now().Add(2*time.Minute))
	r.fireAt(time.Now().Add(30 * time.Second))
	if sb, _ := plane(r.m).Get(ctx, "idle"); sb.State != api.StateRunning {
		t.Fatalf("slept early: %s", sb.State)
	}
	// An open operation holds it awake even past the deadline.
	_, release, err := r.m.use(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	r.fireAt(time.Now().Add(2 * time.Minute))
	if sb, _ := plane(r.m).Get(ctx, "idle"); sb.State != api.StateRunning {
		t.Fatalf("slept while busy: %s", sb.State)
	}
	release()
	r.fireAt(time.Now().Add(4 * time.Minute))
	if sb, _ := plane(r.m).Get(ctx, "idle"); sb.State != api.StateSleeping {
		t.Fatalf("idle sandbox still %s", sb.State)
	}
	if sb, _ := plane(r.m).Get(ctx, "kept"); sb.State != api.StateRunning {
		t.Fatalf("keepAlive sandbox is %s", sb.State)
	}
}

// TestPlatformIdleTimer: a container another class started without
// SelfSleep is slept by the compute's own inactivity timer.
func TestPlatformIdleTimer(t *testing.T) {
	r := newRig(t)
	c := r.m.Compute(nil)
	if err := c.Start(ctx, "plain", durable.StartOptions{SleepAfter: time.Minute}); err != nil {
		t.Fatal(err)
	}
	r.m.tick(ctx, time.Now().Add(30*time.Second))
	if st, _ := c.Status(ctx, "plain"); !st.Running {
		t.Fatalf("slept early: %+v", st)
	}
	r.m.tick(ctx, time.Now().Add(2*time.Minute))
	if st, _ := c.Status(ctx, "plain"); st.Running || !st.Exists {
		t.Fatalf("idle container: %+v", st)
	}
}

func TestFailedStartCleansUpAndRetries(t *testing.T) {
	r := newRig(t)
	r.net.fail = errdefs.Unavailable("no addresses")
	_, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "f"}, false)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("want the network error, got %v", err)
	}
	sb, _ := plane(r.m).Get(ctx, "f")
	if sb.State != api.StateFailed || !strings.Contains(sb.Error, "no addresses") || r.rfs.mounted[sb.ID] {
		t.Fatalf("after failed start: %+v mounted=%v", sb, r.rfs.mounted[sb.ID])
	}
	r.net.fail = nil
	if _, err := plane(r.m).Exec(ctx, "f", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatalf("retry on next request: %v", err)
	}
}

func TestImageIsPinnedAcrossStarts(t *testing.T) {
	r := newRig(t)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "p", Image: "one"}, false); err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	_, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "p", Image: "two"}, false)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("changing the image of a sandbox with files: %v", err)
	}
	// Instance and internet may change at a start.
	sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "p", Instance: "standard-3", Internet: new(bool)}, false)
	if err != nil || sb.Instance != "standard-3" || sb.ImageDigest != "sha256:one" {
		t.Fatalf("restart with new size: %+v %v", sb, err)
	}
}

func TestReconcile(t *testing.T) {
	r := newRig(t)
	live, _, _ := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "live"}, false)
	lost, _, _ := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "lost"}, false)
	// The compute of "lost" disappears while the daemon is down, and a
	// container and a layer nobody owns are left behind.
	r.rt.Delete(ctx, lost.ID, true)
	r.rt.Create(ctx, "orphan", t.TempDir())
	r.rfs.known["orphan-layer"] = true
	// A new daemon (a new Manager over the same store) reconciles.
	m2 := newAttached(t, r.cfg)
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if sb, _ := plane(m2).Get(ctx, "live"); sb.State != api.StateRunning || sb.StartedAt == nil || !sb.StartedAt.Equal(*live.StartedAt) {
		t.Fatalf("live sandbox not adopted: %+v", sb)
	}
	if sb, _ := plane(m2).Get(ctx, "lost"); sb.State != api.StateSleeping {
		t.Fatalf("sandbox without compute: %s", sb.State)
	}
	if _, ok := r.rt.bundles["orphan"]; ok {
		t.Fatal("orphan container survived reconcile")
	}
	if r.rfs.known["orphan-layer"] || !r.rfs.known[lost.ID] {
		t.Fatalf("layers after reconcile: %v", r.rfs.known)
	}
	list, err := plane(m2).List(ctx, control.ListFilter{State: api.StateRunning})
	if err != nil || len(list) != 1 || list[0].Name != "live" {
		t.Fatalf("list running: %+v %v", list, err)
	}
}

// TestFailedCreateLeavesNothing (issue 12 D): a create that fails before
// its sandbox exists (a missing image) leaves no record, so the name is
// free for a retry.
func TestFailedCreateLeavesNothing(t *testing.T) {
	r := newRig(t)
	r.img.err = errdefs.NotFound("image %q not found", "nope")
	for _, createOnly := range []bool{true, false} {
		if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "m", Image: "nope"}, createOnly); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("create with a missing image (createOnly=%v): %v", createOnly, err)
		}
		if sb, err := plane(r.m).Get(ctx, "m"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("the failed create left a record: %+v %v", sb, err)
		}
	}
	if list, _ := plane(r.m).List(ctx, control.ListFilter{}); len(list) != 0 {
		t.Fatalf("listed after a failed create: %+v", list)
	}
	r.img.err = nil
	sb, created, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "m", Image: "good"}, true)
	if err != nil || !created || sb.State != api.StateRunning || sb.ImageDigest != "sha256:good" {
		t.Fatalf("retried create: %+v created=%v %v", sb, created, err)
	}
}

// TestFullNetworkRefusesCreateLeavingNothing: a create refused because the
// network has no address or bridge port left gets resource_exhausted and
// leaves no record and no mount; another failure of the network (the
// negative control) leaves a failed record.
func TestFullNetworkRefusesCreateLeavingNothing(t *testing.T) {
	r := newRig(t)
	r.net.fail = errdefs.ResourceExhausted("no free bridge port: 1023 sandboxes are attached")
	_, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "full"}, true)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "bridge port") {
		t.Fatalf("create on a full network: %v, want resource exhausted naming the bridge port", err)
	}
	if sb, err := plane(r.m).Get(ctx, "full"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the refused create left a record: %+v %v", sb, err)
	}
	r.rfs.mu.Lock()
	for id, up := range r.rfs.mounted {
		if up {
			t.Errorf("the refused create left rootfs %s mounted", id)
		}
	}
	r.rfs.mu.Unlock()
	r.net.fail = errdefs.Internal("veth broke")
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "broke"}, true); err == nil {
		t.Fatal("a create whose network failed succeeded")
	}
	if sb, err := plane(r.m).Get(ctx, "broke"); err != nil || sb.State != api.StateFailed {
		t.Fatalf("control: another network failure must leave a failed record: %+v %v", sb, err)
	}
	r.net.fail = nil
	if sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "full"}, true); err != nil || sb.State != api.StateRunning {
		t.Fatalf("create once the network has room: %+v %v", sb, err)
	}
}

// TestCreateReplacesSandboxThatNeverRan (issue 12 D): a failed sandbox
// that never ran is retried with the new request's own spec, by a
// get-or-create and by a strict create alike; one that ran keeps its
// files and image.
func TestCreateReplacesSandboxThatNeverRan(t *testing.T) {
	r := newRig(t)
	r.net.fail = errdefs.Unavailable("no addresses")
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "n", Image: "one", Env: map[string]string{"A": "1"}}, false); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("want the network error, got %v", err)
	}
	if sb, _ := plane(r.m).Get(ctx, "n"); sb.State != api.StateFailed {
		t.Fatalf("after a failed start: %+v", sb)
	}
	r.net.fail = nil
	sb, created, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "n", Image: "two", Env: map[string]string{"B": "2"}}, false)
	if err != nil || !created || sb.State != api.StateRunning || sb.ImageDigest != "sha256:two" || sb.Env["B"] != "2" || sb.Env["A"] != "" {
		t.Fatalf("get-or-create over a failed sandbox: %+v created=%v %v", sb, created, err)
	}
	// Strict create over one that never ran.
	r.net.fail = errdefs.Unavailable("no addresses")
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s", Image: "one"}, true); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("want the network error, got %v", err)
	}
	r.net.fail = nil
	if sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s", Image: "two"}, true); err != nil || sb.ImageDigest != "sha256:two" {
		t.Fatalf("strict create over a failed sandbox: %+v %v", sb, err)
	}
	// One that ran and then failed to wake keeps its image.
	if err := plane(r.m).Sleep(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	r.net.fail = errdefs.Unavailable("no addresses")
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s"}, false); err == nil {
		t.Fatal("wake with a failing network succeeded")
	}
	r.net.fail = nil
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s", Image: "three"}, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a sandbox that ran changed image: %v", err)
	}
}

// TestFailedWakeStaysAsleep: a wake that fails before the sandbox is set
// up (its image cannot be had: a blob store that is down, say) leaves the
// sandbox sleeping, not failed, and the next request wakes it.
func TestFailedWakeStaysAsleep(t *testing.T) {
	r := newRig(t)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "w"}, false); err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	r.img.err = errdefs.Unavailable("blob store unreachable")
	if _, err := plane(r.m).Exec(ctx, "w", api.ExecRequest{Argv: []string{"true"}}, nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("wake with the image unavailable: want unavailable, got %v", err)
	}
	if sb, _ := plane(r.m).Get(ctx, "w"); sb.State != api.StateSleeping || sb.Error != "" {
		t.Fatalf("after the failed wake: state %s, error %q; want sleeping as before", sb.State, sb.Error)
	}
	r.img.err = nil
	if _, err := plane(r.m).Exec(ctx, "w", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatalf("wake once the image is back: %v", err)
	}
	if sb, _ := plane(r.m).Get(ctx, "w"); sb.State != api.StateRunning {
		t.Fatalf("after the wake: %+v", sb)
	}
}

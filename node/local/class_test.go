package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store/sqlite"
)

func attach(t *testing.T, r *rig) *durable.Host {
	t.Helper()
	h := durable.NewHost(durable.Config{Store: r.cfg.Store.(*sqlite.Store), Compute: r.m.Compute(nil), Logf: t.Logf})
	attachControllers(t, r.m, h, r.now)
	return h
}

func alarmOf(t *testing.T, h *durable.Host, name string) (time.Time, bool) {
	t.Helper()
	st, err := h.StateOf(durable.Address{Class: controller.Class, ID: name})
	if err != nil {
		t.Fatal(err)
	}
	at, ok, err := st.GetAlarm(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return at, ok
}

// TestSleepAlarmIsDurable runs the built-in controller on package
// durable: its sleepAfter alarm is a durable alarm, survives a restart of
// the controller (a new Manager and Host on the same store) and puts the
// idle sandbox to sleep when the new host delivers it; destroy disarms.
func TestSleepAlarmIsDurable(t *testing.T) {
	r := newRig(t)
	h := r.h
	if h == nil {
		h = attach(t, r)
	}
	sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "nap", SleepAfter: "1s"}, false)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := alarmOf(t, h, "nap")
	if !ok || at.Sub(sb.LastActive) < 900*time.Millisecond || at.Sub(sb.LastActive) > 1100*time.Millisecond {
		t.Fatalf("durable alarm %v (armed %v), want lastActive+1s (%v)", at, ok, sb.LastActive)
	}
	// The daemon restarts: a new controller and object host, same store.
	r.m = New(r.cfg)
	h = attach(t, r)
	if err := r.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := plane(r.m).Get(ctx, "nap"); got.State != api.StateRunning {
		t.Fatalf("not adopted: %s", got.State)
	}
	time.Sleep(time.Until(at) + 50*time.Millisecond)
	h.FireDue(ctx)
	if got, _ := plane(r.m).Get(ctx, "nap"); got.State != api.StateSleeping {
		t.Fatalf("after the durable alarm: %s, want sleeping", got.State)
	}
	if _, ok := alarmOf(t, h, "nap"); ok {
		t.Fatal("a sleeping sandbox still has an alarm")
	}
	// Wake it over RPC through the class, then destroy: no alarm is left.
	out, err := h.Call(ctx, durable.Address{Class: controller.Class, ID: "nap"}, "Wake", nil)
	var woke api.Sandbox
	if err != nil || json.Unmarshal(out, &woke) != nil || woke.State != api.StateRunning {
		t.Fatalf("Wake over RPC: %s %v", out, err)
	}
	if _, ok := alarmOf(t, h, "nap"); !ok {
		t.Fatal("a woken sandbox has no alarm")
	}
	if err := plane(r.m).Destroy(ctx, "nap"); err != nil {
		t.Fatal(err)
	}
	if _, ok := alarmOf(t, h, "nap"); ok {
		t.Fatal("destroy left the alarm")
	}
	if _, err := h.Call(ctx, durable.Address{Class: controller.Class, ID: "nap"}, "Wake", nil); err == nil {
		t.Fatal("Wake created a destroyed sandbox")
	}
	// The controller journals through its object: stream = sandbox name,
	// each entry finished.
	j, err := r.cfg.Store.Journal(ctx, "nap")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range j {
		seen[e.Op] = true
		if e.Op == "sleep" && (e.Status != "done" || e.Finished.IsZero() || e.Detail == "") {
			t.Fatalf("sleep entry: %+v", e)
		}
	}
	if !seen["sleep"] || !seen["destroy"] || !seen["wake"] && !seen["start"] {
		t.Fatalf("journal ops: %v", seen)
	}
}

// TestRequestWakesThroughTheClass: a request (exec) to a sleeping sandbox
// asks its controller object to wake it, so the object's idle alarm is
// armed again and the start is the object's (journaled as its
// container.start).
func TestRequestWakesThroughTheClass(t *testing.T) {
	r := newRig(t)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "w", SleepAfter: "1m"}, false); err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, ok := alarmOf(t, r.h, "w"); ok {
		t.Fatal("a sleeping sandbox has an idle alarm")
	}
	if _, err := plane(r.m).Exec(ctx, "w", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if at, ok := alarmOf(t, r.h, "w"); !ok || time.Until(at) < 50*time.Second {
		t.Fatalf("idle alarm after the request woke it: %v %v", at, ok)
	}
	j, err := r.cfg.Store.Journal(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, e := range j {
		if e.Op == "container.start" && e.Status == "done" {
			starts++
		}
	}
	if starts != 2 {
		t.Fatalf("want the create and the wake as the object's container.start, got %d: %+v", starts, j)
	}
	var sp controller.Spec
	if ok, err := r.h.Storage(durable.Address{Class: controller.Class, ID: "w"}).Get(ctx, controller.SpecKey, &sp); !ok || err != nil || sp.SleepAfter != time.Minute {
		t.Fatalf("spec: %+v %v %v", sp, ok, err)
	}
}

// TestClassAdoptsSandboxWithoutSpec: a sandbox whose record predates its
// object's spec (made by an older berth, or started by another class)
// gets a spec from what the compute reports at its first call, and from
// then on the object, not the compute's own timer, sleeps it.
func TestClassAdoptsSandboxWithoutSpec(t *testing.T) {
	r := newRig(t)
	c := r.m.Compute(nil)
	if err := c.Start(ctx, "old", durable.StartOptions{SleepAfter: 2 * time.Minute, Labels: map[string]string{"a": "b"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "old"}, false); err != nil {
		t.Fatal(err)
	}
	var sp controller.Spec
	if ok, err := r.h.Storage(durable.Address{Class: controller.Class, ID: "old"}).Get(ctx, controller.SpecKey, &sp); !ok || err != nil || sp.SleepAfter != 2*time.Minute || sp.Labels["a"] != "b" {
		t.Fatalf("adopted spec: %+v %v %v", sp, ok, err)
	}
	if _, ok := alarmOf(t, r.h, "old"); !ok {
		t.Fatal("adopted sandbox has no idle alarm")
	}
	r.m.tick(ctx, time.Now().Add(10*time.Minute))
	if st, _ := c.Status(ctx, "old"); !st.Running {
		t.Fatal("the compute's timer slept a sandbox its object now sleeps")
	}
	r.fireAt(time.Now().Add(3 * time.Minute))
	if st, _ := c.Status(ctx, "old"); st.Running {
		t.Fatal("the object's idle alarm did not sleep it")
	}
}

// TestPatchesReachTheSpec: a change of network policy or labels made
// outside the object (PATCH) is in the object's stored spec at once, not
// only after the next start.
func TestPatchesReachTheSpec(t *testing.T) {
	r := newRig(t)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "p"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.SetNetwork(ctx, "p", api.NetworkPolicy{Internet: true, Deny: []string{"blocked.example.test"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane(r.m).SetLabels(ctx, "p", map[string]string{"team": "infra"}); err != nil {
		t.Fatal(err)
	}
	var sp controller.Spec
	ok, err := r.h.Storage(durable.Address{Class: controller.Class, ID: "p"}).Get(ctx, controller.SpecKey, &sp)
	if !ok || err != nil || sp.Network == nil || len(sp.Network.Deny) != 1 || sp.Network.Deny[0] != "blocked.example.test" || sp.Labels["team"] != "infra" {
		t.Fatalf("spec after the patches: %+v (network %+v) %v %v", sp, sp.Network, ok, err)
	}
}

// TestUnknownNamesMakeNoObjects: get, sleep and destroy of a name with no
// sandbox are not found without a controller object being made for it.
func TestUnknownNamesMakeNoObjects(t *testing.T) {
	r := newRig(t)
	before := r.h.Live()
	for i := 0; i < 50; i++ {
		name := fmt.Sprintf("nobody-%d", i)
		if _, err := plane(r.m).Get(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get %s: %v", name, err)
		}
		if err := plane(r.m).Sleep(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("sleep %s: %v", name, err)
		}
		if err := plane(r.m).Destroy(ctx, name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("destroy %s: %v", name, err)
		}
	}
	if n := r.h.Live(); n != before {
		t.Fatalf("live objects went from %d to %d for names with no sandbox", before, n)
	}
}

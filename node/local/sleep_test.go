package local

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ops is the sandbox's journal without the controller object's entries.
func ops(t *testing.T, r *rig, name string) []string {
	t.Helper()
	j, err := r.cfg.Store.Journal(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range j {
		if !strings.HasPrefix(e.Op, "container.") {
			out = append(out, e.Op+": "+e.Detail)
		}
	}
	return out
}

func hasOp(list []string, op string) string {
	for _, l := range list {
		if strings.HasPrefix(l, op+": ") {
			return l
		}
	}
	return ""
}

func TestPickEscalations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fs := []frozenInfo{
		{name: "new", frozenAt: t0.Add(20 * time.Minute), bytes: 300 << 20},
		{name: "old", frozenAt: t0, bytes: 100 << 20},
		{name: "mid", frozenAt: t0.Add(10 * time.Minute), bytes: 200 << 20},
	}
	names := func(es []escalation) string {
		var n []string
		for _, e := range es {
			n = append(n, e.name)
		}
		return strings.Join(n, ",")
	}
	now := t0.Add(25 * time.Minute)
	// Negative control: within both bounds nothing escalates.
	if es := pickEscalations(fs, now, 30*time.Minute, 600<<20); len(es) != 0 {
		t.Fatalf("within bounds: %+v", es)
	}
	if es := pickEscalations(fs, now, 0, 0); len(es) != 0 {
		t.Fatalf("no bounds: %+v", es)
	}
	// Schedule: frozen 25m and 15m are past 12m; the 5m one is not.
	if got := names(pickEscalations(fs, now, 12*time.Minute, 0)); got != "old,mid" {
		t.Fatalf("schedule: %s", got)
	}
	// Memory: 600 MiB against 450: the oldest goes first (500 left, still
	// over), then the next (300 left, within).
	es := pickEscalations(fs, now, 0, 450<<20)
	if got := names(es); got != "old,mid" {
		t.Fatalf("memory pressure: %s", got)
	}
	if !strings.Contains(es[0].reason, "freeze memory budget") {
		t.Fatalf("reason: %q", es[0].reason)
	}
	// 550 MiB: only the oldest.
	if got := names(pickEscalations(fs, now, 0, 550<<20)); got != "old" {
		t.Fatalf("memory pressure, one over: %s", got)
	}
}

func TestSleepModeValidation(t *testing.T) {
	r := newRig(t)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "bad", Sleep: "hibernate"}, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unknown sleep mode: %v", err)
	}
	_, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "cp", Sleep: api.SleepCheckpoint}, false)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "cannot checkpoint") {
		t.Fatalf("checkpoint on a node without it: %v", err)
	}
	if _, err := plane(r.m).Get(ctx, "cp"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused create left a sandbox: %v", err)
	}
	sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "dflt"}, false)
	if err != nil || sb.Sleep != api.SleepStop {
		t.Fatalf("default mode: %q %v", sb.Sleep, err)
	}
	r.m.cfg.DefaultSleep = api.SleepFreeze
	sb, _, err = plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz"}, false)
	if err != nil || sb.Sleep != api.SleepFreeze {
		t.Fatalf("operator default freeze: %q %v", sb.Sleep, err)
	}
	sb, _, err = plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "st", Sleep: api.SleepStop}, false)
	if err != nil || sb.Sleep != api.SleepStop {
		t.Fatalf("asked stop under a freeze default: %q %v", sb.Sleep, err)
	}
}

// TestFreezeKeepsComputeAndThaws: a freeze keeps container, network and
// mount and a wake is a thaw (no new container; a process record keeps
// its id); the stop tier (negative control) removes them all.
func TestFreezeKeepsComputeAndThaws(t *testing.T) {
	r := newRig(t)
	fz, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz", Sleep: api.SleepFreeze}, false)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "st"}, false)
	if err != nil {
		t.Fatal(err)
	}
	ag, release, err := r.m.agentOf(ctx, "fz")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ag.StartProcess(ctx, api.StartProcessRequest{Command: "sleep 60", ID: "bg"})
	release()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fz", "st"} {
		if err := plane(r.m).Sleep(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := plane(r.m).Get(ctx, "fz")
	if got.State != api.StateSleeping || got.SleepTier != api.SleepFreeze || got.FrozenAt == nil {
		t.Fatalf("frozen sandbox: %+v", got)
	}
	if !r.rt.frozen[fz.ID] || !r.net.up[fz.ID] || !r.rfs.mounted[fz.ID] || r.rt.bundles[fz.ID] == "" {
		t.Fatalf("freeze did not keep the compute: frozen=%v net=%v mounted=%v", r.rt.frozen[fz.ID], r.net.up[fz.ID], r.rfs.mounted[fz.ID])
	}
	got, _ = plane(r.m).Get(ctx, "st")
	if got.SleepTier != api.SleepStop || r.net.up[st.ID] || r.rfs.mounted[st.ID] || r.rt.bundles[st.ID] != "" {
		t.Fatalf("stop tier kept compute: %+v", got)
	}
	creates := r.rt.creates
	// A request wakes it: a thaw, no new container.
	if _, err := plane(r.m).Exec(ctx, "fz", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, _ = plane(r.m).Get(ctx, "fz")
	if got.State != api.StateRunning || got.LastWake != "thaw" || got.SleepTier != "" || r.rt.frozen[fz.ID] || r.rt.creates != creates {
		t.Fatalf("after thaw: %+v creates %d→%d", got, creates, r.rt.creates)
	}
	ag, release, err = r.m.agentOf(ctx, "fz")
	if err != nil {
		t.Fatal(err)
	}
	q, err := ag.GetProcess(ctx, "bg")
	release()
	if err != nil || q.PID != p.PID || q.ExitCode != nil {
		t.Fatalf("process record after thaw: %+v %v (before %+v)", q, err, p)
	}
	if l := hasOp(ops(t, r, "fz"), "wake"); !strings.Contains(l, "thaw in") {
		t.Fatalf("journal: %v", ops(t, r, "fz"))
	}
	// The stop tier's wake boots a new container.
	if _, err := plane(r.m).Exec(ctx, "st", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r.rt.creates != creates+1 {
		t.Fatalf("stop tier wake: creates %d→%d", creates, r.rt.creates)
	}
}

// TestThawFailureReboots: a thaw that fails boots the sandbox from its
// files, and the answer and the journal say so.
func TestThawFailureReboots(t *testing.T) {
	r := newRig(t)
	fz, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz", Sleep: api.SleepFreeze}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "fz"); err != nil {
		t.Fatal(err)
	}
	creates := r.rt.creates
	r.rt.failThaw = errors.New("injected thaw failure")
	sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz"}, false)
	r.rt.failThaw = nil
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateRunning || !strings.HasPrefix(sb.LastWake, "reboot: ") || !strings.Contains(sb.LastWake, "injected") {
		t.Fatalf("answer after a failed thaw: %+v", sb)
	}
	if r.rt.creates != creates+1 || !r.rfs.known[fz.ID] {
		t.Fatalf("reboot: creates %d→%d, upper kept %v", creates, r.rt.creates, r.rfs.known[fz.ID])
	}
	if l := hasOp(ops(t, r, "fz"), "reboot"); !strings.Contains(l, "injected thaw failure") {
		t.Fatalf("journal: %v", ops(t, r, "fz"))
	}
}

func TestEscalationOnSchedule(t *testing.T) {
	r := newRig(t)
	r.m.cfg.FreezeMax = time.Minute
	fz, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz", Sleep: api.SleepFreeze}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "fz"); err != nil {
		t.Fatal(err)
	}
	r.m.escalateFrozen(ctx, time.Now().Add(30*time.Second)) // not yet
	if got, _ := plane(r.m).Get(ctx, "fz"); got.SleepTier != api.SleepFreeze || !r.rt.frozen[fz.ID] {
		t.Fatalf("escalated early: %+v", got)
	}
	r.m.escalateFrozen(ctx, time.Now().Add(2*time.Minute))
	got, _ := plane(r.m).Get(ctx, "fz")
	if got.State != api.StateSleeping || got.SleepTier != api.SleepStop || got.FrozenAt != nil {
		t.Fatalf("after escalation: %+v", got)
	}
	if r.net.up[fz.ID] || r.rfs.mounted[fz.ID] || r.rt.bundles[fz.ID] != "" || !r.rfs.known[fz.ID] {
		t.Fatal("escalation to stop kept compute or lost the files")
	}
	j := ops(t, r, "fz")
	if l := hasOp(j, "escalate"); !strings.Contains(l, "freeze max 1m0s") || !strings.Contains(l, "checkpoint unavailable") {
		t.Fatalf("journal: %v", j)
	}
	if l := hasOp(j, "checkpoint-unavailable"); !strings.Contains(l, "cannot checkpoint") {
		t.Fatalf("journal: %v", j)
	}
}

func TestEscalationUnderMemoryPressure(t *testing.T) {
	r := newRig(t)
	var ids []string
	for _, n := range []string{"a", "b", "c"} {
		sb, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: n, Sleep: api.SleepFreeze}, false)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		if err := plane(r.m).Sleep(ctx, n); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // distinct freeze times
	}
	got, _ := plane(r.m).Get(ctx, "a")
	each := got.Resources.MemoryMiB << 20 // the fake runtime meters no usage: limits count
	r.m.cfg.FreezeMemoryBytes = 3 * each
	r.m.escalateFrozen(ctx, time.Now()) // negative control: it fits
	for i, n := range []string{"a", "b", "c"} {
		if got, _ := plane(r.m).Get(ctx, n); got.SleepTier != api.SleepFreeze || !r.rt.frozen[ids[i]] {
			t.Fatalf("%s escalated within budget: %+v", n, got)
		}
	}
	r.m.cfg.FreezeMemoryBytes = 2*each + each/2
	r.m.escalateFrozen(ctx, time.Now())
	want := map[string]string{"a": api.SleepStop, "b": api.SleepFreeze, "c": api.SleepFreeze}
	for n, tier := range want {
		if got, _ := plane(r.m).Get(ctx, n); got.SleepTier != tier {
			t.Fatalf("%s: tier %q, want %q", n, got.SleepTier, tier)
		}
	}
	if l := hasOp(ops(t, r, "a"), "escalate"); !strings.Contains(l, "freeze memory budget") {
		t.Fatalf("journal: %v", ops(t, r, "a"))
	}
}

func TestDestroyFrozen(t *testing.T) {
	r := newRig(t)
	fz, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz", Sleep: api.SleepFreeze}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Sleep(ctx, "fz"); err != nil {
		t.Fatal(err)
	}
	thaws := r.rt.thaws
	if err := plane(r.m).Destroy(ctx, "fz"); err != nil {
		t.Fatal(err)
	}
	if _, err := plane(r.m).Get(ctx, "fz"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after destroy: %v", err)
	}
	if r.rt.thaws != thaws+1 || r.rt.bundles[fz.ID] != "" || r.net.up[fz.ID] || r.rfs.known[fz.ID] {
		t.Fatalf("destroy of a frozen sandbox: thaws %d→%d, container %q", thaws, r.rt.thaws, r.rt.bundles[fz.ID])
	}
}

// TestReconcileKeepsFrozen: after a daemon restart a frozen sandbox stays
// frozen and sleeping with its container, and wakes by a thaw; one whose
// container is gone sleeps with its files.
func TestReconcileKeepsFrozen(t *testing.T) {
	r := newRig(t)
	fz, _, _ := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "fz", Sleep: api.SleepFreeze}, false)
	lost, _, _ := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "lost", Sleep: api.SleepFreeze}, false)
	for _, n := range []string{"fz", "lost"} {
		if err := plane(r.m).Sleep(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	r.rt.Delete(ctx, lost.ID, true)
	m2 := newAttached(t, r.cfg)
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := plane(m2).Get(ctx, "fz")
	if got.State != api.StateSleeping || got.SleepTier != api.SleepFreeze || r.rt.bundles[fz.ID] == "" || !r.rt.frozen[fz.ID] || !r.net.up[fz.ID] {
		t.Fatalf("frozen sandbox after reconcile: %+v container %q", got, r.rt.bundles[fz.ID])
	}
	got, _ = plane(m2).Get(ctx, "lost")
	if got.State != api.StateSleeping || got.SleepTier != api.SleepStop || !r.rfs.known[lost.ID] {
		t.Fatalf("frozen sandbox without its container: %+v", got)
	}
	creates := r.rt.creates
	if _, err := plane(m2).Exec(ctx, "fz", api.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := plane(m2).Get(ctx, "fz"); got.LastWake != "thaw" || r.rt.creates != creates {
		t.Fatalf("wake after reconcile: %+v creates %d→%d", got, creates, r.rt.creates)
	}
}

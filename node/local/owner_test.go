package local

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

// twoNodes is a cluster of two rigs, n1 and n2, sharing one store.
func twoNodes(t *testing.T) (*sqlite.Store, *rig, *rig) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, newRigOn(t, st, "n1"), newRigOn(t, st, "n2")
}

func execOut(t *testing.T, r *rig, name, cmd string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	_, err := plane(r.m).Exec(ctx, name, api.ExecRequest{Command: cmd}, &out, &out)
	return out.String(), err
}

// A node acts only on the sandboxes it owns: the creating node owns the
// record, another node refuses it (unavailable, naming the owner), and its
// inventory, load and reconcile leave it alone.
func TestNodeActsOnlyOnItsOwnSandboxes(t *testing.T) {
	st, n1, n2 := twoNodes(t)
	if _, _, err := plane(n1.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s"}, false); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(ctx, "s")
	if err != nil || rec.Owner != "n1" || rec.OwnerEpoch != 1 {
		t.Fatalf("record after create on n1: owner %q epoch %d err %v", rec.Owner, rec.OwnerEpoch, err)
	}
	if out, err := execOut(t, n1, "s", "echo hi"); err != nil || out != "hi\n" {
		t.Fatalf("exec on the owner: %q %v", out, err)
	}
	if _, err := execOut(t, n2, "s", "echo hi"); !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("exec on a node that does not own it: want unavailable, got %v", err)
	}
	if err := n2.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get(ctx, "s"); got.Version != rec.Version && got.Owner != "n1" {
		t.Fatalf("n2's reconcile touched n1's record: %+v", got)
	}
	in, err := n2.m.info(ctx)
	if err != nil || in.Capacity.Sandboxes != 0 {
		t.Fatalf("n2 counts n1's sandbox as its load: %+v %v", in.Capacity, err)
	}
	if n1.rt.creates != 1 || n2.rt.creates != 0 {
		t.Fatalf("containers: n1 %d, n2 %d; want 1, 0", n1.rt.creates, n2.rt.creates)
	}
	if out, err := execOut(t, n1, "s", "echo still"); err != nil || out != "still\n" {
		t.Fatalf("exec on the owner after n2's reconcile: %q %v", out, err)
	}
}

// After a takeover the old owner can neither write the record nor keep
// running the sandbox: its writes fail, Fence stops its container and
// removes its layer without writing, and the new owner serves it.
func TestTakeoverFencesTheOldOwner(t *testing.T) {
	st, n1, n2 := twoNodes(t)
	sb, _, err := plane(n1.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s"}, false)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := store.Takeover(ctx, st, "s", "n2")
	if err != nil || moved.Owner != "n2" || moved.OwnerEpoch != 2 || moved.State != api.StateSleeping {
		t.Fatalf("takeover: %+v %v", moved, err)
	}
	// n1 still runs it and tries to write (a stop persists the record).
	if _, err := n1.m.Compute(nil).Stop(ctx, "s", node.StopOptions{}); err == nil {
		t.Fatal("the old owner's stop succeeded after the takeover")
	}
	after, _ := st.Get(ctx, "s")
	if after.Version != moved.Version || after.Owner != "n2" {
		t.Fatalf("the old owner wrote the record: %+v (takeover left version %d)", after, moved.Version)
	}
	fenced := n1.m.Fence(ctx)
	if len(fenced) != 1 || fenced[0] != "s" {
		t.Fatalf("Fence on the old owner: %v, want [s]", fenced)
	}
	if n1.rt.running[sb.ID] != nil || n1.rfs.known[sb.ID] || n1.rfs.mounted[sb.ID] {
		t.Fatalf("the old owner kept its container or layer: running %v known %v mounted %v",
			n1.rt.running[sb.ID] != nil, n1.rfs.known[sb.ID], n1.rfs.mounted[sb.ID])
	}
	if again, _ := st.Get(ctx, "s"); again.Version != moved.Version {
		t.Fatalf("Fence wrote the record: version %d, want %d", again.Version, moved.Version)
	}
	if got := n1.m.Fence(ctx); len(got) != 0 {
		t.Fatalf("a second Fence found %v", got)
	}
	if _, err := execOut(t, n1, "s", "true"); !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("exec on the fenced node: want unavailable, got %v", err)
	}
	if out, err := execOut(t, n2, "s", "echo moved"); err != nil || out != "moved\n" {
		t.Fatalf("exec on the new owner: %q %v", out, err)
	}
	if rec, _ := st.Get(ctx, "s"); rec.Owner != "n2" || rec.OwnerEpoch != 2 || rec.State != api.StateRunning {
		t.Fatalf("record on the new owner: owner %q epoch %d state %s", rec.Owner, rec.OwnerEpoch, rec.State)
	}
	// The new owner's Fence keeps what it owns.
	if got := n2.m.Fence(ctx); len(got) != 0 {
		t.Fatalf("the owner fenced its own sandbox: %v", got)
	}
}

// Negative control: a node that ignores ownership (a single-host Manager
// on the cluster's store) writes over the new owner's record: the probe
// above would catch a fencing that does nothing.
func TestFencingNegativeControl(t *testing.T) {
	st, n1, _ := twoNodes(t)
	if _, _, err := plane(n1.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "s"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Takeover(ctx, st, "s", "n2"); err != nil {
		t.Fatal(err)
	}
	blind := newRigOn(t, st, "") // no NodeName: no fencing
	if out, err := execOut(t, blind, "s", "echo blind"); err != nil || out != "blind\n" {
		t.Fatalf("exec on the unfenced node: %q %v", out, err)
	}
	if got, _ := st.Get(ctx, "s"); got.State != api.StateRunning {
		t.Fatalf("the unfenced node did not write the record: %+v", got)
	}
}

// A record without an owner (written by a single-host berth before it
// joined a cluster) is claimed by the first node that needs it, once.
func TestUnownedRecordIsClaimedOnce(t *testing.T) {
	st, n1, n2 := twoNodes(t)
	if _, err := st.Put(ctx, store.Sandbox{Name: "old", ID: "sold", State: api.StateSleeping, Image: "debian-trixie"}); err != nil {
		t.Fatal(err)
	}
	if out, err := execOut(t, n1, "old", "echo mine"); err != nil || out != "mine\n" {
		t.Fatalf("exec on the claiming node: %q %v", out, err)
	}
	rec, _ := st.Get(ctx, "old")
	if rec.Owner != "n1" || rec.OwnerEpoch != 1 {
		t.Fatalf("claimed record: owner %q epoch %d", rec.Owner, rec.OwnerEpoch)
	}
	if _, err := execOut(t, n2, "old", "true"); !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("the second node claimed a claimed record: %v", err)
	}
}

// A cluster persists by default: a create that names no persist gets
// Config.DefaultPersist, and one that names it keeps its own choice.
func TestDefaultPersist(t *testing.T) {
	_, n1, _ := twoNodes(t)
	n1.m.cfg.DefaultPersist = api.PersistDisk
	for _, c := range []struct{ name, ask, want string }{{"d", "", api.PersistDisk}, {"n", api.PersistNone, api.PersistNone}} {
		sb, _, err := plane(n1.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: c.name, Persist: c.ask}, false)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Persist != c.want {
			t.Errorf("create %s with persist %q: got %q, want %q", c.name, c.ask, sb.Persist, c.want)
		}
	}
}

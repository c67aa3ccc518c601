package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/sqlite"
)

// putRec writes rec and returns it with its version.
func putRec(t *testing.T, st store.Store, rec store.Sandbox) store.Sandbox {
	t.Helper()
	v, err := st.Put(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = v
	return rec
}

func joinNodes(t *testing.T, st *sqlite.Store, draining string, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		if _, err := st.PutNode(ctx, store.Node{Name: n, Addr: "http://127.0.0.1:1", Roles: []string{"control", "node"}, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if draining != "" {
		if err := st.SetNodeDraining(ctx, draining, true); err != nil {
			t.Fatal(err)
		}
	}
}

type placeTo struct {
	node string
	err  error
	reqs []api.CreateSandboxRequest
}

func (p *placeTo) Place(_ context.Context, req api.CreateSandboxRequest) (string, error) {
	p.reqs = append(p.reqs, req)
	return p.node, p.err
}

func persisted(name, owner string) store.Sandbox {
	return store.Sandbox{Name: name, ID: "s" + name, State: api.StateSleeping, Owner: owner, OwnerEpoch: 1,
		Persist: api.PersistDisk, PersistSnapshot: "snap-" + name, Instance: "custom", Resources: api.Resources{VCPU: 1, MemoryMiB: 512, DiskMB: 1000}}
}

// TestMoveOffDrainingNode: a persisted sleeping sandbox of a draining node
// moves to the member that got the request (it runs sandboxes), or to
// placement's choice from a control-only member or a draining one, with
// the next epoch and a journal entry. Negative controls: a sandbox whose
// files cannot leave the node (persist none, no shared blobs, a last sleep
// that did not persist) stays, its record untouched.
func TestMoveOffDrainingNode(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	joinNodes(t, st, "n2", "n1", "n2", "n3")
	pl := &placeTo{node: "n3"}
	w := &clusterWiring{self: "n1", isNode: true, st: st, stale: time.Hour, logf: t.Logf, placer: pl, sharedBlobs: true}

	rec := putRec(t, st, persisted("a", "n2"))
	to, err := w.moveOff(ctx, rec)
	if err != nil || to != "n1" {
		t.Fatalf("move to the entry node: %q %v", to, err)
	}
	got, _ := st.Get(ctx, "a")
	if got.Owner != "n1" || got.OwnerEpoch != 2 || got.State != api.StateSleeping || got.PersistSnapshot != "snap-a" {
		t.Fatalf("after the move: %+v", got)
	}
	if j, _ := st.Journal(ctx, "a"); len(j) == 0 || j[len(j)-1].Op != "move" || !strings.Contains(j[len(j)-1].Detail, "n2") {
		t.Fatalf("journal: %+v", j)
	}
	if len(pl.reqs) != 0 {
		t.Fatalf("placement asked although this node takes it: %+v", pl.reqs)
	}
	// The same read again: the record moved, the move is refused.
	if _, err := w.moveOff(ctx, rec); !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("second move with a stale read: want failed precondition, got %v", err)
	}

	// persist interval sleeps to the blob store as disk does: it moves.
	iv := persisted("iv", "n2")
	iv.Persist = api.PersistInterval
	if to, err := w.moveOff(ctx, putRec(t, st, iv)); err != nil || to != "n1" {
		t.Fatalf("move of a persist-interval sandbox: %q %v", to, err)
	}

	// A control-only member asks placement.
	ctl := &clusterWiring{self: "c1", isNode: false, st: st, logf: t.Logf, placer: pl, sharedBlobs: true}
	rec = putRec(t, st, persisted("b", "n2"))
	if to, err := ctl.moveOff(ctx, rec); err != nil || to != "n3" {
		t.Fatalf("move from a control member: %q %v", to, err)
	}
	if len(pl.reqs) != 1 || pl.reqs[0].Snapshot != "snap-b" || pl.reqs[0].Resources == nil || pl.reqs[0].Resources.MemoryMiB != 512 {
		t.Fatalf("placement request: %+v", pl.reqs)
	}
	// A draining member does not take it either.
	w2 := &clusterWiring{self: "n2", isNode: true, st: st, logf: t.Logf, placer: pl, sharedBlobs: true}
	rec = putRec(t, st, persisted("own", "n2"))
	if to, err := w2.moveOff(ctx, rec); err != nil || to != "n3" {
		t.Fatalf("move at the draining node: %q %v", to, err)
	}
	// Placement finds nothing: an error the forwarder logs, not a retry.
	pl.err = errdefs.Unavailable("no node has room")
	rec = putRec(t, st, persisted("full", "n2"))
	if _, err := ctl.moveOff(ctx, rec); err == nil || errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("placement failure: %v", err)
	}

	// Files that cannot leave the node: it stays.
	none := persisted("none", "n2")
	none.Persist, none.PersistSnapshot = api.PersistNone, ""
	failed := putRec(t, st, persisted("failed", "n2"))
	for _, e := range []store.JournalEntry{{Op: "sleep"}, {Op: "wake"}, {Op: "persist-failed"}, {Op: "sleep"}} {
		e.Sandbox, e.At = "failed", time.Now()
		if err := st.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		w   *clusterWiring
		rec store.Sandbox
	}{
		{w, putRec(t, st, none)},
		{&clusterWiring{self: "n1", isNode: true, st: st, logf: t.Logf, placer: pl}, putRec(t, st, persisted("local-blobs", "n2"))},
		{w, failed},
	} {
		to, err := c.w.moveOff(ctx, c.rec)
		if err != nil || to != "" {
			t.Fatalf("%s: moved to %q (%v), want it to stay", c.rec.Name, to, err)
		}
		if got, _ := st.Get(ctx, c.rec.Name); got.Owner != "n2" || got.Version != c.rec.Version {
			t.Fatalf("%s: record changed: %+v", c.rec.Name, got)
		}
	}
	// Control: once a later sleep persisted, the same sandbox moves.
	if err := st.Append(ctx, store.JournalEntry{Sandbox: "failed", Op: "sleep", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if to, err := w.moveOff(ctx, failed); err != nil || to != "n1" {
		t.Fatalf("after a sleep that persisted: %q %v", to, err)
	}
}

// TestDrainerSleepsRunningSandboxes: while its entry is draining the node
// sleeps its running, persisted sandboxes, at most drainBatch at once and
// per turn, and never another node's or one created with persist none;
// undrained, it stops. Negative control: not draining, nothing sleeps.
func TestDrainerSleepsRunningSandboxes(t *testing.T) {
	ctx := context.Background()
	st := clusterStore(t)
	joinNodes(t, st, "", "n1", "n2")
	for _, name := range []string{"r1", "r2", "r3"} {
		rec := persisted(name, "n1")
		rec.State = api.StateRunning
		putRec(t, st, rec)
	}
	pinned := persisted("pinned", "n1")
	pinned.State, pinned.Persist = api.StateRunning, api.PersistNone
	putRec(t, st, pinned)
	other := persisted("other", "n2")
	other.State = api.StateRunning
	putRec(t, st, other)
	putRec(t, st, persisted("asleep", "n1"))

	var (
		mu            sync.Mutex
		slept         []string
		inFlight, top atomic.Int32
	)
	sleep := func(ctx context.Context, name string) error {
		if n := inFlight.Add(1); n > top.Load() {
			top.Store(n)
		}
		defer inFlight.Add(-1)
		time.Sleep(20 * time.Millisecond)
		rec, err := st.Get(ctx, name)
		if err != nil {
			return err
		}
		if rec.State != api.StateRunning {
			return errors.New("slept a sandbox that is not running: " + name)
		}
		rec.State = api.StateSleeping
		if _, err := st.Put(ctx, rec); err != nil {
			return err
		}
		mu.Lock()
		slept = append(slept, name)
		mu.Unlock()
		return nil
	}
	d := &drainer{self: "n1", st: st, sleep: sleep, shared: true, batch: drainBatch, logf: t.Logf}

	if got := d.turn(ctx); len(got) != 0 {
		t.Fatalf("not draining, slept %v", got)
	}
	if err := st.SetNodeDraining(ctx, "n1", true); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var turns [][]string
	for i := 0; i < 4; i++ {
		got := d.turn(ctx)
		sort.Strings(got)
		turns = append(turns, got)
	}
	t.Logf("drained 3 running sandboxes in %d turns, %s (sleeps of 20ms each)", len(turns), time.Since(t0).Round(time.Millisecond))
	if len(turns[0]) != 2 || len(turns[1]) != 1 || len(turns[2]) != 0 || len(turns[3]) != 0 {
		t.Fatalf("turns slept %v, want 2, 1, 0, 0", turns)
	}
	sort.Strings(slept)
	if strings.Join(slept, ",") != "r1,r2,r3" {
		t.Fatalf("slept %v, want r1..r3 only", slept)
	}
	if top.Load() > drainBatch || top.Load() < 2 {
		t.Fatalf("at most %d sleeps ran at once, want %d", top.Load(), drainBatch)
	}
	for name, want := range map[string]string{"pinned": api.StateRunning, "other": api.StateRunning, "asleep": api.StateSleeping} {
		if got, _ := st.Get(ctx, name); got.State != want {
			t.Fatalf("%s is %s, want %s", name, got.State, want)
		}
	}

	// Undrained: a sandbox that runs again is left alone.
	if err := st.SetNodeDraining(ctx, "n1", false); err != nil {
		t.Fatal(err)
	}
	woke, _ := st.Get(ctx, "r1")
	woke.State = api.StateRunning
	putRec(t, st, woke)
	if got := d.turn(ctx); len(got) != 0 {
		t.Fatalf("undrained, slept %v", got)
	}

	// Without a shared blob store the drain sleeps nothing: nothing could move.
	if err := st.SetNodeDraining(ctx, "n1", true); err != nil {
		t.Fatal(err)
	}
	local := &drainer{self: "n1", st: st, sleep: sleep, shared: false, batch: drainBatch, logf: t.Logf}
	if got := local.turn(ctx); len(got) != 0 {
		t.Fatalf("no shared blobs, slept %v", got)
	}
}

// TestDrainingWakeRefusesReplayable: on a draining node a forwarded
// request that its entry can send again does not wake a sleeping
// sandbox: the answer is 503 marked moving (X-Berth-Forward-Moving), for
// the entry to move the sandbox. Negative controls: not draining, or a
// request the entry cannot resend, wakes it as before; so does a request
// that was not forwarded at all.
func TestDrainingWakeRefusesReplayable(t *testing.T) {
	st := clusterStore(t)
	joinNodes(t, st, "", "n2")
	guard := drainingWake(st, "n2")
	rec := persisted("a", "n2")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := guard(r.Context(), rec); err != nil {
			w.WriteHeader(api.HTTPStatus(err))
			w.Write([]byte(err.Error()))
			return
		}
		w.Write([]byte("woke"))
	})
	srv := httptest.NewServer(forward.NewReceiver(forward.ReceiverConfig{Token: "tok", API: h}))
	t.Cleanup(srv.Close)
	do := func(replay bool) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+forward.Prefix+"/api/v1/sandboxes/a/exec", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set(forward.HeaderHop, "1")
		if replay {
			req.Header.Set("X-Berth-Forward-Replay", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Berth-Forward-Moving"), string(b)
	}
	if code, mark, body := do(true); code != 200 || mark != "" {
		t.Fatalf("not draining: %d %q %s, want it woken", code, mark, body)
	}
	if err := st.SetNodeDraining(context.Background(), "n2", true); err != nil {
		t.Fatal(err)
	}
	if code, mark, body := do(true); code != http.StatusServiceUnavailable || mark != "1" || !strings.Contains(body, "moving off draining node") {
		t.Fatalf("draining, resendable: %d %q %s, want 503 marked moving", code, mark, body)
	}
	if code, mark, body := do(false); code != 200 || mark != "" {
		t.Fatalf("draining, not resendable: %d %q %s, want it woken", code, mark, body)
	}
	if err := guard(context.Background(), rec); err != nil {
		t.Fatalf("a request made here: %v, want it woken", err)
	}
}

package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// runCluster checks store.Cluster: node entries and leases. Every store
// implements it; times are compared against the store's own Now, never
// the test's clock, because a cluster store's clock is its server's.
func runCluster(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	cluster := func(t *testing.T) store.Cluster {
		c, ok := open(t).(store.Cluster)
		if !ok {
			t.Fatal("the store does not implement store.Cluster")
		}
		return c
	}
	now := func(t *testing.T, c store.Cluster) time.Time {
		n, err := c.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Run("Cluster/Nodes", func(t *testing.T) {
		c := cluster(t)
		if _, err := c.GetNode(ctx, "n1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("GetNode missing: want not found, got %v", err)
		}
		if _, err := c.PutNode(ctx, store.Node{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("PutNode without a name: want invalid argument, got %v", err)
		}
		started := now(t, c).Add(-time.Minute)
		in := store.Node{
			Name: "n1", Addr: "https://10.0.0.1:7071", Roles: []string{"control", "node"},
			Capacity:  store.NodeResources{MilliCPU: 2000, MemoryBytes: 24 << 30, DiskBytes: 100 << 30},
			Committed: store.NodeResources{MilliCPU: 500, MemoryBytes: 1 << 30},
			InFlight:  2, Isolation: []string{"runc", "gvisor"}, Labels: map[string]string{"zone": "a"},
			Images: []string{"sha256:aa"}, Layers: map[string]int64{"bb": 4096},
			StartedAt: started, Draining: true, // Draining is not PutNode's to set
		}
		before := now(t, c)
		got, err := c.PutNode(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got.Epoch != 1 || got.Draining || got.Heartbeat.Before(before.Add(-time.Second)) || got.Heartbeat.After(now(t, c).Add(time.Second)) {
			t.Fatalf("first PutNode: epoch %d draining %v heartbeat %s (store now %s)", got.Epoch, got.Draining, got.Heartbeat, before)
		}
		read, err := c.GetNode(ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if read.Addr != in.Addr || len(read.Roles) != 2 || read.Capacity != in.Capacity || read.Committed != in.Committed ||
			read.InFlight != 2 || len(read.Isolation) != 2 || read.Labels["zone"] != "a" || len(read.Images) != 1 ||
			read.Layers["bb"] != 4096 || !read.StartedAt.Equal(started.Truncate(time.Millisecond)) || read.Epoch != 1 ||
			!read.Heartbeat.Equal(got.Heartbeat) {
			t.Fatalf("node round trip:\n in %+v\ngot %+v", in, read)
		}

		// Draining is SetNodeDraining's, and heartbeats keep it.
		if err := c.SetNodeDraining(ctx, "n1", true); err != nil {
			t.Fatal(err)
		}
		if err := c.SetNodeDraining(ctx, "nope", true); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("drain of a node that never joined: want not found, got %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		in.Draining = false
		again, err := c.PutNode(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if again.Epoch != 1 || !again.Draining || again.Heartbeat.Before(got.Heartbeat) {
			t.Fatalf("heartbeat with the same StartedAt: epoch %d draining %v heartbeat %s (was %s)", again.Epoch, again.Draining, again.Heartbeat, got.Heartbeat)
		}
		// A restart (new StartedAt) is a new join.
		in.StartedAt = started.Add(30 * time.Second)
		restarted, err := c.PutNode(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if restarted.Epoch != 2 {
			t.Fatalf("PutNode after a restart: epoch %d, want 2", restarted.Epoch)
		}

		if _, err := c.PutNode(ctx, store.Node{Name: "n0", StartedAt: started}); err != nil {
			t.Fatal(err)
		}
		all, err := c.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 || all[0].Name != "n0" || all[1].Name != "n1" || !all[1].Draining || all[1].Epoch != 2 {
			t.Fatalf("Nodes: %+v", all)
		}
		if err := c.DeleteNode(ctx, "n0"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetNode(ctx, "n0"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("GetNode after delete: want not found, got %v", err)
		}
		if err := c.DeleteNode(ctx, "n0"); err != nil {
			t.Fatalf("deleting a missing node: %v", err)
		}
	})

	t.Run("Cluster/Leases", func(t *testing.T) {
		c := cluster(t)
		if _, err := c.GetLease(ctx, "sandbox/a"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("GetLease of a key never held: want not found, got %v", err)
		}
		for _, bad := range []struct {
			key, holder string
			ttl         time.Duration
		}{{"", "n1", time.Second}, {"k", "", time.Second}, {"k", "n1", 0}} {
			if _, err := c.AcquireLease(ctx, bad.key, bad.holder, bad.ttl); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("AcquireLease(%q, %q, %s): want invalid argument, got %v", bad.key, bad.holder, bad.ttl, err)
			}
		}
		l1, err := c.AcquireLease(ctx, "sandbox/a", "n1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l1.Epoch < 1 || l1.Holder != "n1" || !l1.Expires.After(now(t, c)) {
			t.Fatalf("first lease: %+v", l1)
		}
		// The holder again: a renewal, same epoch.
		l1b, err := c.AcquireLease(ctx, "sandbox/a", "n1", 2*time.Minute)
		if err != nil || l1b.Epoch != l1.Epoch || !l1b.Expires.After(l1.Expires) {
			t.Fatalf("reacquire by the holder: %+v %v (was %+v)", l1b, err, l1)
		}
		// Another holder while it is held: refused, with who holds it.
		cur, err := c.AcquireLease(ctx, "sandbox/a", "n2", time.Minute)
		if !errors.Is(err, errdefs.ErrAlreadyExists) || cur.Holder != "n1" || cur.Epoch != l1.Epoch {
			t.Fatalf("acquire of a held lease: %+v %v", cur, err)
		}
		if got, err := c.GetLease(ctx, "sandbox/a"); err != nil || got.Holder != "n1" || got.Epoch != l1.Epoch {
			t.Fatalf("GetLease: %+v %v", got, err)
		}

		// Expiry: a short lease, then another holder takes it at a
		// higher epoch and the old holder can neither renew nor release.
		short, err := c.AcquireLease(ctx, "sandbox/b", "n1", 150*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		taken, err := c.AcquireLease(ctx, "sandbox/b", "n2", time.Minute)
		if err != nil || taken.Epoch <= short.Epoch || taken.Holder != "n2" {
			t.Fatalf("take over an expired lease: %+v %v (was %+v)", taken, err, short)
		}
		if _, err := c.RenewLease(ctx, short, time.Minute); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("renew by the holder that lost it: want failed precondition, got %v", err)
		}
		if err := c.ReleaseLease(ctx, short); err != nil {
			t.Fatalf("release of a lost lease: %v", err)
		}
		if got, err := c.GetLease(ctx, "sandbox/b"); err != nil || got.Holder != "n2" {
			t.Fatalf("a stale release freed the lease: %+v %v", got, err)
		}
		renewed, err := c.RenewLease(ctx, taken, time.Hour)
		if err != nil || renewed.Epoch != taken.Epoch || !renewed.Expires.After(taken.Expires) {
			t.Fatalf("renew by the holder: %+v %v", renewed, err)
		}
		if _, err := c.RenewLease(ctx, taken, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("renew with ttl 0: want invalid argument, got %v", err)
		}
		// Release, then the next holder's epoch is still higher.
		if err := c.ReleaseLease(ctx, renewed); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetLease(ctx, "sandbox/b"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("GetLease after release: want not found, got %v", err)
		}
		if _, err := c.RenewLease(ctx, renewed, time.Minute); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("renew after release: want failed precondition, got %v", err)
		}
		next, err := c.AcquireLease(ctx, "sandbox/b", "n1", time.Minute)
		if err != nil || next.Epoch <= renewed.Epoch {
			t.Fatalf("acquire after release: %+v %v (released epoch %d)", next, err, renewed.Epoch)
		}
		// The same holder taking back a lease it released is a new
		// tenure too (what it wrote under the old epoch is fenced).
		if err := c.ReleaseLease(ctx, next); err != nil {
			t.Fatal(err)
		}
		back, err := c.AcquireLease(ctx, "sandbox/b", "n1", time.Minute)
		if err != nil || back.Epoch <= next.Epoch {
			t.Fatalf("reacquire by the same holder after release: %+v %v (released epoch %d)", back, err, next.Epoch)
		}
	})

	t.Run("Cluster/LeaseRace", func(t *testing.T) {
		c := cluster(t)
		const n = 8
		var wg sync.WaitGroup
		wins := make(chan store.Lease, n)
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				l, err := c.AcquireLease(ctx, "object/x", string(rune('a'+i)), time.Minute)
				switch {
				case err == nil:
					wins <- l
				case !errors.Is(err, errdefs.ErrAlreadyExists):
					errs <- err
				}
			}(i)
		}
		wg.Wait()
		close(wins)
		close(errs)
		for err := range errs {
			t.Errorf("racing acquire: %v", err)
		}
		var holders []string
		for l := range wins {
			holders = append(holders, l.Holder)
		}
		if len(holders) != 1 {
			t.Fatalf("%d of %d racing holders got the lease: %v", len(holders), n, holders)
		}
	})
}

//go:build cluster

package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestDrain: node 2 is drained through node 1. Node 2 puts its running
// sandbox to sleep (persisting it to S3), and the next request for it
// through node 1 moves it to node 1, where it runs with its file intact
// (sha256). Placement puts nothing new on node 2 meanwhile, and node ls
// counts what node 2 still owns. Negative control: a sandbox created with
// persist none cannot leave node 2, so it keeps running there and is
// served through node 1 by forwarding.
func TestDrain(t *testing.T) {
	ctx := context.Background()
	n1, n2 := node(1), node(2)
	sb := createOn(t, n2, "cl-drain", api.CreateSandboxRequest{Instance: "lite"})
	pinned := createOn(t, n2, "cl-drain-pin", api.CreateSandboxRequest{Instance: "lite", Persist: api.PersistNone})
	busy := createOn(t, n2, "cl-drain-busy", api.CreateSandboxRequest{Instance: "lite"})
	if r := execVia(t, n1, busy.Name, "echo still-here > /home/user/f"); r.ExitCode != 0 {
		t.Fatalf("write in %s: %+v", busy.Name, r)
	}
	res := execVia(t, n1, sb.Name, "head -c 4194304 /dev/urandom > /home/user/blob && sha256sum /home/user/blob | cut -d' ' -f1")
	want := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || len(want) != 64 {
		t.Fatalf("write the file: %+v", res)
	}
	before, err := readRecord(ctx, sb.Name)
	if err != nil || before.State != api.StateRunning || before.Owner != "n2" {
		t.Fatalf("before the drain %s is %+v (%v), want running on n2", sb.Name, before, err)
	}

	t.Cleanup(func() {
		if _, err := n1.c.UndrainNode(context.Background(), "n2"); err != nil {
			t.Errorf("undrain n2: %v", err)
		}
	})
	// Steady traffic on busy through node 1 while node 2 drains: the
	// drain must still move it (a request in flight when it slept must
	// not wake it on node 2 for good).
	stop := make(chan struct{})
	traffic := make(chan [2]int, 1)
	go func() {
		ok, failed := 0, 0
		defer func() { traffic <- [2]int{ok, failed} }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			r, err := n1.c.Exec(ctx, busy.Name, api.ExecRequest{Command: "cat /home/user/f", TimeoutMs: 30000})
			if err != nil || r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "still-here" {
				failed++
				t.Logf("exec in %s during the drain: %+v %v", busy.Name, r, err)
				continue
			}
			ok++
		}
	}()
	drained := time.Now()
	n, err := n1.c.DrainNode(ctx, "n2")
	if err != nil || !n.Draining {
		t.Fatalf("drain n2 through n1: %+v %v", n, err)
	}

	// Node 2 sleeps its running sandbox on one of its next heartbeats.
	var asleep record
	if err := waitFor(60*time.Second, func() error {
		r, err := readRecord(ctx, sb.Name)
		if err != nil {
			return err
		}
		if r.State != api.StateSleeping || r.Owner != "n2" {
			return fmt.Errorf("%s is %s on %s", sb.Name, r.State, r.Owner)
		}
		asleep = r
		return nil
	}); err != nil {
		t.Fatalf("node 2 did not put %s to sleep: %v", sb.Name, err)
	}
	t.Logf("drain: n2 slept %s %s after the drain (heartbeat %s)", sb.Name, time.Since(drained).Round(time.Millisecond), heartbeat)

	// The drain's progress, as node ls shows it.
	n, err = n1.c.GetNode(ctx, "n2")
	if err != nil || !n.Draining || n.Sleeping < 1 || n.Running < 1 {
		t.Fatalf("node n2 while draining: %+v %v (want draining, the pinned sandbox running, %s sleeping)", n, err, sb.Name)
	}
	t.Logf("n2 draining: owns %d running, %d sleeping", n.Running, n.Sleeping)

	// The next request through node 1 moves it there and runs it.
	t0 := time.Now()
	got := execVia(t, n1, sb.Name, "sha256sum /home/user/blob | cut -d' ' -f1")
	t.Logf("drain: the first request through n1 after the sleep answered in %s (move + wake from S3)", time.Since(t0).Round(time.Millisecond))
	if strings.TrimSpace(got.Stdout) != want {
		t.Fatalf("after the move the file's sha256 is %q (%+v), want %s", got.Stdout, got, want)
	}
	after, err := readRecord(ctx, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Owner != "n1" || after.OwnerEpoch <= asleep.OwnerEpoch || after.State != api.StateRunning {
		t.Fatalf("after the move the record is %+v (asleep on n2: %+v), want running on n1 with a higher epoch", after, asleep)
	}
	if cur, err := n2.c.Get(ctx, sb.Name); err != nil || cur.Node != "n1" {
		t.Fatalf("GET through n2 says %q (%v), want n1", cur.Node, err)
	}

	// The busy sandbox left node 2 under its traffic.
	if err := waitFor(60*time.Second, func() error {
		r, err := readRecord(ctx, busy.Name)
		if err != nil {
			return err
		}
		if r.Owner == "n2" {
			return fmt.Errorf("%s is %s on n2", busy.Name, r.State)
		}
		return nil
	}); err != nil {
		close(stop)
		<-traffic
		t.Fatalf("under steady requests %s never left draining n2: %v", busy.Name, err)
	}
	moved := time.Since(drained)
	time.Sleep(500 * time.Millisecond) // a few more requests on the new owner
	close(stop)
	counts := <-traffic
	b, _ := readRecord(ctx, busy.Name)
	t.Logf("drain under traffic: %s moved to %s %s after the drain; %d execs answered, %d failed (an exec running when the sleep came ends with it)",
		busy.Name, b.Owner, moved.Round(time.Millisecond), counts[0], counts[1])
	if r := execVia(t, n1, busy.Name, "cat /home/user/f"); strings.TrimSpace(r.Stdout) != "still-here" {
		t.Fatalf("after the move %s has %q in its file", busy.Name, r.Stdout)
	}

	// Negative control: persist none stays, running, on node 2, and is
	// still served there.
	p, err := readRecord(ctx, pinned.Name)
	if err != nil || p.Owner != "n2" || p.State != api.StateRunning {
		t.Fatalf("the persist-none sandbox is %+v (%v), want running on n2", p, err)
	}
	if r := execVia(t, n1, pinned.Name, "hostname"); r.ExitCode != 0 {
		t.Fatalf("exec in the pinned sandbox through n1: %+v", r)
	}

	// No new placements on node 2: creates through node 2 land elsewhere.
	for i := range 3 {
		s := create(t, n2, api.CreateSandboxRequest{Name: fmt.Sprintf("cl-drain-new-%d", i), Instance: "lite"})
		if s.Node == "n2" {
			t.Fatalf("create %s through n2 landed on draining n2", s.Name)
		}
	}

	// Undrained, node 2 takes placements again (what it keeps is its own).
	n, err = n1.c.UndrainNode(ctx, "n2")
	if err != nil || n.Draining {
		t.Fatalf("undrain: %+v %v", n, err)
	}
}

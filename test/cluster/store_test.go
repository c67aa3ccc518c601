//go:build cluster

package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestStoreRestart: PostgreSQL restarts under the cluster (every
// connection ended, the data kept). What was acknowledged before is all
// there after, every node answers again without a restart of its own, and
// the sandboxes stay where they were (a restart shorter than the stale
// bound moves nothing).
func TestStoreRestart(t *testing.T) {
	ctx := context.Background()
	var sbs []api.Sandbox
	for _, n := range cluster[1:] {
		sb := createOn(t, n, "cl-pgrestart-"+n.name, api.CreateSandboxRequest{Instance: "lite"})
		if res := execVia(t, n, sb.Name, "echo -n kept-"+n.name+" > /home/user/kept"); res.ExitCode != 0 {
			t.Fatalf("write in %s: %+v", sb.Name, res)
		}
		sbs = append(sbs, sb)
	}
	before := map[string]record{}
	for _, sb := range sbs {
		rec, err := readRecord(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		before[sb.Name] = rec
	}
	t0 := time.Now()
	if err := pg.Restart(); err != nil {
		t.Fatalf("restart PostgreSQL: %v", err)
	}
	down := time.Since(t0)
	for _, n := range cluster[1:] {
		t1 := time.Now()
		if err := waitFor(30*time.Second, func() error {
			_, err := n.c.List(ctx, "", nil)
			return err
		}); err != nil {
			t.Fatalf("%s does not answer after PostgreSQL came back: %v", n.name, err)
		}
		t.Logf("PostgreSQL restart (%s down): %s lists again after %s", down.Round(time.Millisecond), n.name, time.Since(t1).Round(time.Millisecond))
	}
	for i, sb := range sbs {
		owner := cluster[i+1]
		for _, via := range cluster[1:] {
			res := execVia(t, via, sb.Name, "cat /home/user/kept")
			if strings.TrimSpace(res.Stdout) != "kept-"+owner.name {
				t.Fatalf("after the PostgreSQL restart %s through %s reads %+v", sb.Name, via.name, res)
			}
		}
		rec, err := readRecord(ctx, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		if b := before[sb.Name]; rec.Owner != b.Owner || rec.OwnerEpoch != b.OwnerEpoch {
			t.Errorf("%s moved across a PostgreSQL restart of %s: %+v → %+v", sb.Name, down.Round(time.Millisecond), b, rec)
		}
	}
}

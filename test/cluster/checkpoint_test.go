//go:build cluster

package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
)

// TestCheckpointBoundsNodeLoss: a running sandbox with persist interval
// (every 10 s) on node 3 is checkpointed while it runs; node 3 is killed
// without the sandbox ever sleeping, and the sandbox answers through node 1
// with what the last checkpoint held (sha256 equal), without what was
// written after it: what a crash loses is bounded by the period. Negative
// control: the same with persist disk (no checkpoint, never slept) comes
// back without the file.
func TestCheckpointBoundsNodeLoss(t *testing.T) {
	for _, c := range []struct {
		persist, every string
		kept           bool
	}{
		{api.PersistInterval, "10s", true},
		{api.PersistDisk, "", false},
	} {
		t.Run(c.persist, func(t *testing.T) {
			ctx := context.Background()
			n3, n1 := node(3), node(1)
			sb := createOn(t, n3, "cl-ckpt-"+c.persist, api.CreateSandboxRequest{Instance: "lite", Persist: c.persist, PersistEvery: c.every})
			res := execVia(t, n3, sb.Name, "head -c 1048576 /dev/urandom > /home/user/before && sha256sum /home/user/before | cut -d' ' -f1")
			want := strings.TrimSpace(res.Stdout)
			if res.ExitCode != 0 || len(want) != 64 {
				t.Fatalf("write the file: %+v", res)
			}
			written := time.Now()
			if c.kept {
				// The first checkpoint after the write.
				err := waitFor(60*time.Second, func() error {
					cur, err := n1.c.Get(ctx, sb.Name)
					if err != nil {
						return err
					}
					if cur.LastCheckpoint == nil || !cur.LastCheckpoint.After(written) {
						return errString("no checkpoint since the write yet")
					}
					t.Logf("checkpoint at %s, %s after the write", cur.LastCheckpoint.Format(time.RFC3339Nano), cur.LastCheckpoint.Sub(written).Round(time.Millisecond))
					return nil
				})
				if err != nil {
					t.Fatalf("persist interval 10s: %v", err)
				}
			} else if cur, err := n1.c.Get(ctx, sb.Name); err != nil || cur.LastCheckpoint != nil {
				t.Fatalf("persist disk took a checkpoint while running: %+v %v", cur.LastCheckpoint, err)
			}
			execVia(t, n3, sb.Name, "echo lost > /home/user/after")

			restartOnCleanup(t, n3)
			kill := time.Now()
			n3.d.Kill9()
			var got api.ExecResult
			err := waitFor(90*time.Second, func() error {
				r, err := n1.c.Exec(ctx, sb.Name, api.ExecRequest{Command: "(sha256sum /home/user/before 2>/dev/null || echo none) | cut -d' ' -f1; test -e /home/user/after && echo after || echo no-after", TimeoutMs: 30000})
				if err != nil {
					return err
				}
				got = r
				return nil
			})
			if err != nil {
				t.Fatalf("no answer through n1 after node 3 was killed: %v", err)
			}
			t.Logf("%s: answer through n1 %s after the kill: %q", c.persist, time.Since(kill).Round(time.Millisecond), got.Stdout)
			lines := strings.Fields(got.Stdout)
			if len(lines) != 2 {
				t.Fatalf("unexpected answer %+v", got)
			}
			if c.kept && lines[0] != want {
				t.Fatalf("the checkpointed file came back as %q, want sha256 %s", lines[0], want)
			}
			if !c.kept && lines[0] != "none" {
				t.Fatalf("negative control: without a checkpoint the file should be lost with the node, got %q", lines[0])
			}
			if lines[1] != "no-after" {
				t.Fatalf("a file written after the last checkpoint survived the node's loss (%q): the test does not show what it claims", lines[1])
			}
		})
	}
}

type errString string

func (e errString) Error() string { return string(e) }

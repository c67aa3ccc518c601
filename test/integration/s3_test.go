//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob/s3/s3test"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestSnapshotsOnS3WithFaults runs a daemon whose blob store is the real S3
// server behind a fault-injecting proxy: snapshots survive a run of 503s
// (retries), fail cleanly while S3 is down (unavailable, nothing recorded,
// the sandbox not left frozen), and a blob corrupted in flight is refused
// on restore with no sandbox left behind; the intact blob then restores.
func TestSnapshotsOnS3WithFaults(t *testing.T) {
	srv := s3test.Require(t)
	srv.EnsureBucket(t)
	ctx := context.Background()
	px := s3test.NewFaultProxy(t, srv.Endpoint)
	env := []string{"BERTH_S3_ACCESS_KEY=" + srv.AccessKey, "BERTH_S3_SECRET_KEY=" + srv.SecretKey}
	prefix := fmt.Sprintf("it%s-%d/", itID, time.Now().UnixNano())
	t.Cleanup(func() { srv.RemovePrefix(t, prefix) })
	var snaps []string
	t.Cleanup(func() {
		// Snapshots recorded against S3 go before the daemon returns to
		// its local blob store (sandboxes' own cleanups ran already).
		if d != nil {
			for _, id := range snaps {
				_ = d.c.DeleteSnapshot(ctx, id)
			}
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Fatal(err)
		}
	})
	d.stop()
	var err error
	if d, err = startDaemon(env, "--s3-endpoint", px.URL, "--s3-bucket", srv.Bucket, "--s3-prefix", prefix); err != nil {
		t.Fatal(err)
	}

	sandbox(t, api.CreateSandboxRequest{Name: "it-s3"})
	run(t, "it-s3", "echo one > /home/user/f")
	s1, err := d.c.Snapshot(ctx, "it-s3", api.SnapshotRequest{Name: "it-s3-one"})
	if err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, s1.ID)
	if px.Requests.Load() == 0 {
		t.Fatal("the snapshot did not go through the S3 proxy")
	}

	// A run of 503s: retried with backoff, the snapshot succeeds.
	run(t, "it-s3", "echo two > /home/user/f")
	px.FailNext.Store(3)
	t0 := time.Now()
	s2, err := d.c.Snapshot(ctx, "it-s3", api.SnapshotRequest{Name: "it-s3-two"})
	if err != nil {
		t.Fatalf("snapshot through three 503s: %v", err)
	}
	snaps = append(snaps, s2.ID)
	t.Logf("FIGURE snapshot through 3 injected 503s: %s (%d failed requests)", time.Since(t0).Round(time.Millisecond), px.Failed.Load())
	if px.Failed.Load() < 3 {
		t.Fatalf("only %d requests were failed; the faults were not exercised", px.Failed.Load())
	}

	// S3 down: a clean unavailable error, nothing recorded, and the
	// sandbox runs on (its freeze was released).
	px.Down.Store(true)
	t0 = time.Now()
	_, err = d.c.Snapshot(ctx, "it-s3", api.SnapshotRequest{Name: "it-s3-three"})
	t.Logf("FIGURE snapshot with S3 down fails after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("snapshot with S3 down: %v, want unavailable", err)
	}
	if l, err := d.c.ListSnapshots(ctx, "it-s3", ""); err != nil || len(l) != 2 {
		t.Fatalf("snapshots after a failed one: %+v %v, want the two good ones", l, err)
	}
	if r := run(t, "it-s3", "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("sandbox after a failed snapshot: %+v", r)
	}
	px.Down.Store(false)

	// A first restore on a host that did not take the snapshot (this one
	// forgets its adopted layers) downloads from S3 and verifies it.
	dropAdopted(t, s1.SHA256)
	dropAdopted(t, s2.SHA256)
	gets := px.BlobGets.Load()
	sandbox(t, api.CreateSandboxRequest{Name: "it-s3-r2", Snapshot: s2.ID})
	if r := run(t, "it-s3-r2", "cat /home/user/f"); r.Stdout != "two\n" {
		t.Fatalf("restored from S3: %q", r.Stdout)
	}
	if px.BlobGets.Load() == gets {
		t.Fatal("the restore did not read the blob from S3")
	}

	// A blob corrupted in flight: refused, and no sandbox is left.
	px.Corrupt.Store(true)
	_, _, err = d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-s3-bad", Snapshot: s1.ID})
	px.Corrupt.Store(false)
	if err == nil {
		_ = d.c.Destroy(ctx, "it-s3-bad")
		t.Fatal("a sandbox started from a blob corrupted in flight")
	}
	t.Logf("corrupted blob refused: %v", err)
	if sb, err := d.c.Get(ctx, "it-s3-bad"); !errors.Is(err, errdefs.ErrNotFound) {
		_ = d.c.Destroy(ctx, "it-s3-bad")
		t.Fatalf("after a refused restore the sandbox is %+v (%v), want not found", sb, err)
	}
	// Control: the same snapshot restores once the bytes are intact.
	sandbox(t, api.CreateSandboxRequest{Name: "it-s3-r1", Snapshot: s1.ID})
	if r := run(t, "it-s3-r1", "cat /home/user/f"); r.Stdout != "one\n" {
		t.Fatalf("restored from S3: %q", r.Stdout)
	}
}

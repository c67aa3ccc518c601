//go:build cluster

package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// readDoc reads sandbox name's record as the state store holds it: its
// version, state and document fields.
func readDoc(ctx context.Context, name string) (int64, string, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, "", nil, err
	}
	defer c.Close(context.Background())
	var v int64
	var state string
	var raw []byte
	if err := c.QueryRow(ctx, `SELECT version, state, doc::text FROM sandboxes WHERE name = $1`, name).Scan(&v, &state, &raw); err != nil {
		return 0, "", nil, err
	}
	doc := map[string]any{}
	err = json.Unmarshal(raw, &doc)
	return v, state, doc, err
}

// changedKeys lists the top-level fields that differ between two docs.
func changedKeys(a, b map[string]any) []string {
	var out []string
	for k := range b {
		if !reflect.DeepEqual(a[k], b[k]) {
			out = append(out, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// blobStoreDown checks that err is unavailable and names the blob store.
func blobStoreDown(err error) error {
	if err == nil {
		return errors.New("it succeeded")
	}
	msg := strings.ToLower(err.Error())
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) || !(strings.Contains(msg, "blob store") || strings.Contains(msg, "s3")) {
		return fmt.Errorf("want unavailable naming the blob store (S3), got %v", err)
	}
	return nil
}

// TestS3Down: with the suite's versitygw stopped, a snapshot (of a sandbox
// on node 1, asked through node 2) and a cross-node restore (the wake on
// node 1 of a sandbox that slept on node 3 and moved when node 3 was
// stopped past the stale bound) fail with 503 unavailable naming the blob
// store, and nothing is recorded: no snapshot record, the snapshotted
// sandbox's record untouched, the moved one still sleeping on the same
// persisted snapshot. With versitygw back, both work.
func TestS3Down(t *testing.T) {
	ctx := context.Background()
	n1, n2, n3 := node(1), node(2), node(3)
	a := createPinned(t, n1, api.CreateSandboxRequest{Name: "cl-s3-snap", Instance: "lite"})
	b := createPinned(t, n3, api.CreateSandboxRequest{Name: "cl-s3-wake", Instance: "lite"})
	res := execVia(t, n3, b.Name, "head -c 1048576 /dev/urandom > /home/user/blob && sha256sum /home/user/blob | cut -d' ' -f1")
	want := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || len(want) != 64 {
		t.Fatalf("write in %s: %+v", b.Name, res)
	}
	if err := n3.c.Sleep(ctx, b.Name); err != nil {
		t.Fatalf("sleep %s on n3 (persists to S3): %v", b.Name, err)
	}
	_, _, docA, err := readDoc(ctx, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	_, stateB, docB, err := readDoc(ctx, b.Name)
	if err != nil || stateB != api.StateSleeping || docB["PersistSnapshot"] == "" {
		t.Fatalf("%s after the sleep: %s %v (%v); want sleeping with a persisted snapshot", b.Name, stateB, docB["PersistSnapshot"], err)
	}

	stopS3()
	t.Cleanup(func() {
		if s3Cmd == nil {
			if err := launchS3(false); err != nil {
				t.Errorf("restart versitygw: %v", err)
			}
		}
	})

	// A snapshot.
	t0 := time.Now()
	_, err = n2.c.Snapshot(ctx, a.Name, api.SnapshotRequest{})
	t.Logf("snapshot of %s through n2 with S3 down: %s: %v", a.Name, time.Since(t0).Round(time.Millisecond), err)
	if e := blobStoreDown(err); e != nil {
		t.Fatalf("snapshot of %s with S3 down: %v", a.Name, e)
	}
	if snaps, err := n1.c.ListSnapshots(ctx, a.Name, ""); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots of %s after the failed one: %+v (%v); want none", a.Name, snaps, err)
	}
	// What a snapshot records in the sandbox's own record is its chain
	// (and, for a persisting sleep, the persisted snapshot); other fields
	// (activity) may move meanwhile.
	_, _, after, err := readDoc(ctx, a.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Chain", "PersistSnapshot", "State"} {
		if !reflect.DeepEqual(after[k], docA[k]) {
			t.Fatalf("the record of %s changed its %s from %v to %v in a failed snapshot", a.Name, k, docA[k], after[k])
		}
	}
	t.Logf("fields of %s's record that moved meanwhile: %v", a.Name, changedKeys(docA, after))

	// A cross-node restore: n3 stopped past the stale bound, the next
	// request through n1 takes the sandbox over and must wake it there
	// from S3.
	if err := n3.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n3.signal(syscall.SIGCONT) })
	if err := waitFor(4*stale, func() error { return nodeHealth(n1, "n3", api.NodeStale) }); err != nil {
		t.Fatalf("n1 never saw the stopped n3 as stale: %v", err)
	}
	var last error
	t1 := time.Now()
	err = waitFor(60*time.Second, func() error {
		_, last = n1.c.Exec(ctx, b.Name, api.ExecRequest{Command: "true", TimeoutMs: 30000})
		if last == nil || strings.Contains(strings.ToLower(last.Error()), "blob store") {
			return nil
		}
		return last // moving off the dead node: retry
	})
	t.Logf("wake of %s through n1 with S3 down: %s: %v", b.Name, time.Since(t1).Round(time.Millisecond), last)
	if err != nil {
		t.Fatalf("the wake of %s never failed naming the blob store: %v", b.Name, err)
	}
	if e := blobStoreDown(last); e != nil {
		t.Fatalf("wake of %s on n1 with S3 down: %v", b.Name, e)
	}
	_, state, doc, err := readDoc(ctx, b.Name)
	if err != nil || state != api.StateSleeping || doc["PersistSnapshot"] != docB["PersistSnapshot"] {
		t.Fatalf("%s after the failed wake: %s, persisted snapshot %v (%v); want still sleeping on %v", b.Name, state, doc["PersistSnapshot"], err, docB["PersistSnapshot"])
	}
	t.Logf("%s after the failed wake: sleeping on %v, owner %v (the takeover from the dead n3 stands; the wake recorded nothing)", b.Name, doc["PersistSnapshot"], doc["Owner"])
	if err := n3.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// S3 back: both work.
	if err := launchS3(false); err != nil {
		t.Fatalf("restart versitygw: %v", err)
	}
	if _, err := n2.c.Snapshot(ctx, a.Name, api.SnapshotRequest{}); err != nil {
		t.Fatalf("snapshot of %s with S3 back: %v", a.Name, err)
	}
	var got api.ExecResult
	if err := waitFor(60*time.Second, func() error {
		var err error
		got, err = n1.c.Exec(ctx, b.Name, api.ExecRequest{Command: "sha256sum /home/user/blob | cut -d' ' -f1", TimeoutMs: 30000})
		return err
	}); err != nil {
		t.Fatalf("wake of %s through n1 with S3 back: %v", b.Name, err)
	}
	if strings.TrimSpace(got.Stdout) != want {
		t.Fatalf("%s after the wake reads sha256 %q, want %s", b.Name, got.Stdout, want)
	}
	if cur, err := n1.c.Get(ctx, b.Name); err != nil || cur.Node == "n3" {
		t.Fatalf("%s woke on %q (%v), want off n3", b.Name, cur.Node, err)
	}
}

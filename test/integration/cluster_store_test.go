//go:build integration

package integration

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/pgtest"
)

// TestClusterStore runs `berth serve --cluster` against a real PostgreSQL
// server of its own (the DSN given in $BERTH_CLUSTER_DSN, as an operator
// keeps it off the command line):
//   - a DSN nobody serves fails start-up naming the host, never the password;
//   - sandboxes, their files and the journal live in PostgreSQL, across a
//     daemon restart, and the SQLite daemon never sees them;
//   - with the database server stopped the API answers 503 and records
//     nothing, and it works again once the server is back, without a
//     daemon restart.
func TestClusterStore(t *testing.T) {
	ctx := context.Background()
	if list, err := d.c.List(ctx, "", nil); err != nil || len(list) > 0 {
		t.Skipf("needs a daemon with no sandboxes (the cluster daemon shares its data dir): %d sandboxes, %v", len(list), err)
	}
	srv := pgtest.Start(t)
	dsn := srv.NewDB(t)
	u, _ := url.Parse(dsn)
	password, _ := u.User.Password()

	// An unreachable DSN: start-up fails, clearly, in seconds.
	port := strings.TrimPrefix(freePort(), "127.0.0.1:")
	bad := "postgres://berth:hunter2-" + password[:6] + "@127.0.0.1:" + port + "/berth"
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, filepath.Join(binDir, "berth"), "serve", "--cluster", bad,
		"--listen", freePort(), "--preview-listen", freePort(), "--data", dataDir, "--run-dir", itRunDir,
		"--bridge", itBridge, "--subnet", itSubnet).CombinedOutput()
	if err == nil || cctx.Err() != nil {
		t.Fatalf("berth serve with an unreachable --cluster: %v\n%s", err, out)
	}
	if msg := string(out); !strings.Contains(msg, "127.0.0.1:"+port) || !strings.Contains(msg, "--cluster") || strings.Contains(msg, "hunter2") {
		t.Fatalf("the start-up error must name 127.0.0.1:%s and --cluster, never the password:\n%s", port, msg)
	}
	t.Logf("unreachable DSN: %s", strings.TrimSpace(string(out)))

	// Swap the suite's daemon for one on PostgreSQL; put it back at the end.
	d.stop()
	d = nil
	t.Cleanup(func() {
		if d != nil {
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Errorf("restart the suite's daemon: %v", err)
		}
	})
	env := []string{"BERTH_CLUSTER_DSN=" + dsn}
	// A cluster member that runs sandboxes serves the node API (other
	// members forward to it).
	nodeListen := freePort()
	if d, err = startDaemon(env, "--node-listen", nodeListen); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-pg"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d != nil {
			d.c.Destroy(context.Background(), "it-pg")
		}
	})
	run(t, "it-pg", "echo kept > /home/user/kept.txt")
	if err := d.c.Sleep(ctx, "it-pg"); err != nil {
		t.Fatal(err)
	}
	d.stop()
	if d, err = startDaemon(env, "--node-listen", nodeListen); err != nil {
		t.Fatal(err)
	}
	if sb, err := d.c.Get(ctx, "it-pg"); err != nil || sb.State != api.StateSleeping {
		t.Fatalf("after a daemon restart: %+v %v", sb, err)
	}
	if res := run(t, "it-pg", "cat /home/user/kept.txt"); res.Stdout != "kept\n" {
		t.Fatalf("woken sandbox lost its file: %+v", res)
	}
	// The records are PostgreSQL's: read them there.
	var state string
	var ops int
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	err = c.QueryRow(ctx, `SELECT state, (SELECT count(*) FROM journal WHERE sandbox = 'it-pg') FROM sandboxes WHERE name = 'it-pg'`).Scan(&state, &ops)
	c.Close(ctx)
	if err != nil || state != api.StateRunning || ops < 3 {
		t.Fatalf("in PostgreSQL: state %q, %d journal entries, %v; want running with its create, sleep and wake", state, ops, err)
	}

	// The database server goes away: 503, nothing recorded.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// (Get answers from the sandbox's live controller object; the
	// inventory and every change go to the store.)
	if _, err := d.c.List(ctx, "", nil); !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("list with PostgreSQL stopped: want 503 unavailable, got %v", err)
	}
	if err := d.c.Sleep(ctx, "it-pg"); !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("sleep with PostgreSQL stopped: want 503 unavailable, got %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// A member that missed heartbeats past --node-stale refuses work
	// until its next heartbeat gets through: a short pause, not an error.
	var sb api.Sandbox
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		sb, err = d.c.Get(ctx, "it-pg")
		if !errdefs.IsKind(err, errdefs.ErrUnavailable) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || sb.State != api.StateRunning {
		t.Fatalf("after PostgreSQL came back: %+v %v (the refused sleep must not be recorded)", sb, err)
	}
	if res := run(t, "it-pg", "cat /home/user/kept.txt"); res.Stdout != "kept\n" {
		t.Fatalf("exec after PostgreSQL came back: %+v", res)
	}
	if err := d.c.Destroy(ctx, "it-pg"); err != nil {
		t.Fatal(err)
	}

	// Back on SQLite, the sandbox was never there; and the daemon's log
	// never held the DSN's password.
	d.stop()
	if d, err = startDaemon(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.Get(ctx, "it-pg"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("the SQLite daemon sees the cluster's sandbox: %v", err)
	}
	log, _ := os.ReadFile(d.log.Name())
	if strings.Contains(string(log), password) {
		t.Fatal("the daemon log holds the DSN's password")
	}
	if !strings.Contains(string(log), "state store: PostgreSQL at "+u.Host) {
		t.Fatalf("the daemon log does not name the state store's server %s", u.Host)
	}
}

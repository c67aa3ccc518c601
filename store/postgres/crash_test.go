package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
)

const crashHelperEnv = "PG_CRASH_HELPER_DSN"

// crashHelper moves 20 keys from a: to b: in one ObjectCommit (40
// writes); with the failpoint armed the process dies by SIGKILL after
// the first write reached the server.
func crashHelper(dsn string) int {
	ctx := context.Background()
	s, err := Open(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var ws []store.ObjectWrite
	for i := 0; i < 20; i++ {
		ws = append(ws, store.ObjectWrite{Key: fmt.Sprintf("a:%02d", i), Delete: true},
			store.ObjectWrite{Key: fmt.Sprintf("b:%02d", i), Value: []byte(fmt.Sprint(i))})
	}
	if err := s.ObjectCommit(ctx, "ledger", ws); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// TestCrashMidCommit: a berth process killed (SIGKILL, at the failpoint
// inside ObjectCommit) in the middle of a transaction leaves none of it:
// the server rolls back what a dead session left open. The control run
// without the failpoint moves every key, so a partial move would show.
func TestCrashMidCommit(t *testing.T) {
	if !failpoint.Enabled {
		t.Skip("needs failpoints: go test -tags berthtest")
	}
	ctx := context.Background()
	dsn := pgtest.DB(t)
	s := openDSN(t, dsn)
	var ws []store.ObjectWrite
	for i := 0; i < 20; i++ {
		ws = append(ws, store.ObjectWrite{Key: fmt.Sprintf("a:%02d", i), Value: []byte(fmt.Sprint(i))})
	}
	if err := s.ObjectCommit(ctx, "ledger", ws); err != nil {
		t.Fatal(err)
	}
	count := func() (a, b int) {
		kvs, err := s.ObjectList(ctx, "ledger", "", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			if strings.HasPrefix(kv.Key, "a:") {
				a++
			} else {
				b++
			}
		}
		return a, b
	}
	run := func(env ...string) (killed bool) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), append([]string{crashHelperEnv + "=" + dsn}, env...)...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return false
		}
		if ee, ok := err.(*exec.ExitError); ok {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				return true
			}
		}
		t.Fatalf("helper: %v\n%s", err, out)
		return false
	}
	if !run("BERTH_FAILPOINTS=" + FailpointObjectCommit + "=kill9") {
		t.Fatal("the helper was not killed at the failpoint")
	}
	if a, b := count(); a != 20 || b != 0 {
		t.Fatalf("after kill -9 mid-transaction: %d a-keys, %d b-keys; want all 20 untouched", a, b)
	}
	if run() {
		t.Fatal("the helper was killed without a failpoint")
	}
	if a, b := count(); a != 0 || b != 20 {
		t.Fatalf("after a clean run: %d a-keys, %d b-keys", a, b)
	}
}

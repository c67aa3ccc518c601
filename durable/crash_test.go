package durable_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/store/sqlite"
)

// needFailpoints skips a test that kills its helper at a failpoint when the
// test binary was built without them (go test without -tags berthtest).
func needFailpoints(t *testing.T) {
	t.Helper()
	if !failpoint.Enabled {
		t.Skip("needs failpoints: run with go test -tags berthtest (scripts/test.sh does)")
	}
}

// The crash tests run a "daemon" in a child process (this test binary,
// re-executed with DURABLE_HELPER set) and kill it at a failpoint with a
// real SIGKILL, then reopen the state the way a restarted daemon would.

func TestMain(m *testing.M) {
	if role := os.Getenv("DURABLE_HELPER"); role != "" {
		if err := helper(role, os.Getenv("DURABLE_DB"), os.Getenv("DURABLE_DIR")); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Ledger is the class the crash tests use: Move moves all "a:" keys to
// "b:" keys in one transaction; its Alarm performs an external effect
// (appending to a file) through State.Do.
type Ledger struct {
	st  *durable.State
	dir string
}

func (l *Ledger) Move(ctx context.Context) error {
	return l.st.Storage.Transaction(ctx, func(tx *durable.Tx) error {
		es, err := tx.List(durable.ListOptions{Prefix: "a:"})
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := tx.Delete(e.Key); err != nil {
				return err
			}
			if err := tx.Put("b:"+strings.TrimPrefix(e.Key, "a:"), e.Value); err != nil {
				return err
			}
		}
		return nil
	})
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line + "\n")
	return err
}

func (l *Ledger) Alarm(ctx context.Context, info durable.AlarmInfo) error {
	if err := appendLine(filepath.Join(l.dir, "deliveries"), fmt.Sprint(info.RetryCount)); err != nil {
		return err
	}
	effect := func(ctx context.Context) (any, error) {
		return "sent", appendLine(filepath.Join(l.dir, "effects"), "effect")
	}
	if os.Getenv("DURABLE_NO_JOURNAL") != "" { // the negative control
		_, err := effect(ctx)
		return err
	}
	key := "alarm-" + info.ScheduledAt.UTC().Format(time.RFC3339Nano)
	return l.st.Do(ctx, "send-report", key, map[string]string{"to": "ops"}, nil, effect)
}

func ledgerHost(path, dir string) (*durable.Host, func(), error) {
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		return nil, nil, err
	}
	h := durable.NewHost(durable.Config{Store: s, AlarmTick: 20 * time.Millisecond})
	err = h.Register("Ledger", (*Ledger)(nil), func(st *durable.State) (any, error) { return &Ledger{st: st, dir: dir}, nil })
	return h, func() { s.Close() }, err
}

var ledger = durable.Address{Class: "Ledger", ID: "main"}

func helper(role, db, dir string) error {
	h, closeStore, err := ledgerHost(db, dir)
	if err != nil {
		return err
	}
	defer closeStore()
	ctx := context.Background()
	switch role {
	case "move":
		_, err := h.Call(ctx, ledger, "Move", nil)
		return err
	case "alarms":
		// Serve alarms until none is armed (or give up).
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			h.FireDue(ctx)
			var armed bool
			_ = h.DoAs(ctx, ledger, func(_ any, st *durable.State) error {
				_, armed, err = st.GetAlarm(ctx)
				return err
			})
			if !armed {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("alarm still armed")
	}
	return fmt.Errorf("unknown role %q", role)
}

func runHelper(t *testing.T, role, db, dir string, env ...string) (killed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"DURABLE_HELPER=" + role, "DURABLE_DB=" + db, "DURABLE_DIR=" + dir}, env...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return false
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	t.Fatalf("helper %s: %v\n%s", role, err, out)
	return false
}

func keys(t *testing.T, db string) (a, b int) {
	t.Helper()
	h, closeStore, err := ledgerHost(db, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	es, err := h.Storage(ledger).List(context.Background(), durable.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		switch {
		case strings.HasPrefix(e.Key, "a:"):
			a++
		case strings.HasPrefix(e.Key, "b:"):
			b++
		}
	}
	return a, b
}

// TestTransactionAtomicUnderKill9 is issue test 1.
func TestTransactionAtomicUnderKill9(t *testing.T) {
	needFailpoints(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	h, closeStore, err := ledgerHost(db, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := h.Storage(ledger).Put(context.Background(), fmt.Sprintf("a:%02d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	closeStore()
	// Killed after the first of 40 writes hit the database file.
	if !runHelper(t, "move", db, dir, "BERTH_FAILPOINTS="+sqlite.FailpointObjectCommit+"=kill9") {
		t.Fatal("helper was not killed at the failpoint")
	}
	if a, b := keys(t, db); a != 20 || b != 0 {
		t.Fatalf("after kill -9 mid-transaction: %d a-keys, %d b-keys; want all 20 untouched", a, b)
	}
	// Control: the same transaction without the crash moves everything,
	// so the check above could see a partial move if there were one.
	if runHelper(t, "move", db, dir) {
		t.Fatal("helper killed without a failpoint")
	}
	if a, b := keys(t, db); a != 0 || b != 20 {
		t.Fatalf("after a clean run: %d a-keys, %d b-keys", a, b)
	}
}

func lines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

// TestAlarmDuringDowntime is issue test 2: an alarm falls due while no
// daemon runs; the next daemon delivers it, dies (kill -9) after the
// handler's effect and before the alarm is cleared, and the daemon after
// that redelivers it with RetryCount 1. The effect happens once because
// the handler goes through the journal; the negative control without the
// journal shows the effect twice.
func TestAlarmDuringDowntime(t *testing.T) {
	needFailpoints(t)
	for _, journal := range []bool{true, false} {
		t.Run(fmt.Sprintf("journal=%v", journal), func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "state.db")
			h, closeStore, err := ledgerHost(db, dir)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			due := time.Now().Add(150 * time.Millisecond)
			if err := h.DoAs(ctx, ledger, func(_ any, st *durable.State) error { return st.SetAlarm(ctx, due) }); err != nil {
				t.Fatal(err)
			}
			closeStore() // the daemon goes down before the alarm is due
			time.Sleep(time.Until(due) + 100*time.Millisecond)
			var env []string
			if !journal {
				env = append(env, "DURABLE_NO_JOURNAL=1")
			}
			if !runHelper(t, "alarms", db, dir, append(env, "BERTH_FAILPOINTS="+durable.FailpointAlarmHandled+"=kill9")...) {
				t.Fatal("first delivery was not killed at the failpoint")
			}
			if runHelper(t, "alarms", db, dir, env...) {
				t.Fatal("second daemon was killed")
			}
			if d := lines(filepath.Join(dir, "deliveries")); strings.Join(d, ",") != "0,1" {
				t.Fatalf("deliveries (retry counts) = %v, want [0 1]", d)
			}
			effects := len(lines(filepath.Join(dir, "effects")))
			if journal && effects != 1 {
				t.Fatalf("effect happened %d times through the journal, want exactly 1", effects)
			}
			if !journal && effects != 2 {
				t.Fatalf("negative control: effect happened %d times without the journal, want 2 (else the test cannot see a repeat)", effects)
			}
		})
	}
}

// TestAlarmClockJumps moves the clock backwards then far forwards: the
// alarm neither fires early nor gets lost, and fires once.
func TestAlarmClockJumps(t *testing.T) {
	dir := t.TempDir()
	s, err := sqlite.Open(context.Background(), filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := time.Now()
	now := base
	h := durable.NewHost(durable.Config{Store: s, Now: func() time.Time { return now }})
	if err := h.Register("Ledger", (*Ledger)(nil), func(st *durable.State) (any, error) { return &Ledger{st: st, dir: dir}, nil }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := base.Add(10 * time.Second)
	if err := h.DoAs(ctx, ledger, func(_ any, st *durable.State) error { return st.SetAlarm(ctx, at) }); err != nil {
		t.Fatal(err)
	}
	now = base.Add(-time.Hour) // clock jumps back
	h.FireDue(ctx)
	if n := len(lines(filepath.Join(dir, "deliveries"))); n != 0 {
		t.Fatalf("fired %d times before its time", n)
	}
	now = base.Add(48 * time.Hour) // clock jumps far forward
	h.FireDue(ctx)
	h.FireDue(ctx)
	if d := lines(filepath.Join(dir, "deliveries")); len(d) != 1 || d[0] != "0" {
		t.Fatalf("after the jump forward: deliveries %v, want one", d)
	}
	_ = h.DoAs(ctx, ledger, func(_ any, st *durable.State) error {
		if _, armed, _ := st.GetAlarm(ctx); armed {
			t.Error("alarm still armed after a successful delivery")
		}
		return nil
	})
}

// TestAlarmWaitsForItsClass: a daemon that does not know an alarm's class
// keeps the alarm (without counting attempts) for one that does.
func TestAlarmWaitsForItsClass(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "state.db"))
	now := time.Now()
	clock := func() time.Time { return now }
	ctx := context.Background()
	if _, err := s.SetObjectAlarm(ctx, ledger.String(), now); err != nil {
		t.Fatal(err)
	}
	bare := durable.NewHost(durable.Config{Store: s, Now: clock})
	for i := 0; i < 10; i++ {
		bare.FireDue(ctx)
		now = now.Add(2 * time.Minute)
	}
	h := durable.NewHost(durable.Config{Store: s, Now: clock})
	if err := h.Register("Ledger", (*Ledger)(nil), func(st *durable.State) (any, error) { return &Ledger{st: st, dir: dir}, nil }); err != nil {
		t.Fatal(err)
	}
	h.FireDue(ctx)
	if d := lines(filepath.Join(dir, "deliveries")); len(d) != 1 || d[0] != "0" {
		t.Fatalf("deliveries %v, want one with retry count 0", d)
	}
}

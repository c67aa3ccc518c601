package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
)

// TestServerStopAndRestart runs on a server of its own. While the server
// is down every call is unavailable and records nothing; once it is back
// the same Store works again without being reopened. Then a restart under
// a steady load of writes: every failure meanwhile is unavailable (or the
// failed precondition of a write that raced an unacknowledged one), and no
// acknowledged write is lost.
func TestServerStopAndRestart(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Start(t)
	s := openDSN(t, srv.NewDB(t))
	if _, err := s.Put(ctx, store.Sandbox{Name: "a", State: api.StateRunning}); err != nil {
		t.Fatal(err)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"Get": func() error { _, err := s.Get(ctx, "a"); return err },
		"Put": func() error {
			_, err := s.Put(ctx, store.Sandbox{Name: "a", State: api.StateSleeping, Version: 1})
			return err
		},
		"List":         func() error { _, err := s.List(ctx); return err },
		"ObjectCommit": func() error { return s.ObjectCommit(ctx, "o", []store.ObjectWrite{{Key: "k", Value: []byte("1")}}) },
		"AcquireLease": func() error { _, err := s.AcquireLease(ctx, "k", "n1", time.Minute); return err },
		"Now":          func() error { _, err := s.Now(ctx); return err },
	}
	for name, call := range calls {
		t0 := time.Now()
		err := call()
		if !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "unavailable") {
			t.Fatalf("%s with the server stopped: want unavailable, got %v", name, err)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Fatalf("%s with the server stopped took %s to fail", name, d)
		}
	}
	t.Logf("with the server stopped: %v", calls["Get"]())

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatalf("Get after the server came back, same Store: %v", err)
	}
	if got.State != api.StateRunning || got.Version != 1 {
		t.Fatalf("the Put refused while the server was down was recorded: %+v", got)
	}
	if _, ok, _ := s.ObjectGet(ctx, "o", "k"); ok {
		t.Fatal("the ObjectCommit refused while the server was down was recorded")
	}
	for name, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("%s after the server came back: %v", name, err)
		}
	}

	// A restart (fast shutdown: open sessions are ended with 57P01) under
	// a writer that keeps going.
	var acked, unavailable, raced atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			sb, err := s.Get(ctx, "a")
			if err == nil {
				n, _ := strconv.Atoi(sb.Env["n"])
				sb.Env = map[string]string{"n": strconv.Itoa(n + 1)}
				_, err = s.Put(ctx, sb)
				if err == nil {
					acked.Add(1)
					continue
				}
			}
			switch {
			case errdefs.IsKind(err, errdefs.ErrUnavailable):
				unavailable.Add(1)
				time.Sleep(20 * time.Millisecond)
			case errors.Is(err, errdefs.ErrFailedPrecondition):
				raced.Add(1) // an earlier write committed, unacknowledged
			default:
				t.Errorf("during the restart: %v", err)
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	before := acked.Load()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for acked.Load() < before+20 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if acked.Load() < before+20 {
		t.Fatalf("writes did not resume after the restart (%d acknowledged before, %d after)", before, acked.Load())
	}
	got, err = s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(got.Env["n"])
	t.Logf("restart under load: %d writes acknowledged, %d calls unavailable, %d raced an unacknowledged write; counter %d",
		acked.Load(), unavailable.Load(), raced.Load(), n)
	if int64(n) < acked.Load() {
		t.Fatalf("the counter is %d after %d acknowledged increments: an acknowledged write was lost", n, acked.Load())
	}
}

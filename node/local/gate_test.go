package local

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestStartGateBounds: beyond Limit starts wait; beyond MaxQueue waiting
// the answer is TryLater with a Retry-After of at least a second, and a
// start that waited MaxWait gets the same; a freed slot goes to a waiter.
func TestStartGateBounds(t *testing.T) {
	g := newStartGate(GateConfig{Limit: 1, MaxQueue: 1, MaxWait: 200 * time.Millisecond}, 1)
	rel, err := g.acquire(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := g.acquire(context.Background(), "")
		if err == nil {
			r()
		}
		got <- err
	}()
	waitQueued(t, g, 1)
	_, err = g.acquire(context.Background(), "")
	if d, ok := errdefs.RetryAfter(err); !ok || d < time.Second || !errdefs.IsKind(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("over the queue bound: got %v (retry after %v)", err, d)
	}
	rel()
	if err := <-got; err != nil {
		t.Fatalf("queued start: %v", err)
	}
	// A start that waits too long is refused the same way.
	rel, _ = g.acquire(context.Background(), "")
	_, err = g.acquire(context.Background(), "")
	if _, ok := errdefs.RetryAfter(err); !ok {
		t.Fatalf("after MaxWait: got %v", err)
	}
	rel()
	if r, q, _ := g.state(); r != 0 || q != 0 {
		t.Fatalf("gate not empty: %d running, %d queued", r, q)
	}
}

// TestStartGateFair: with one slot, tenant a's ten waiting starts and
// tenant b's one alternate: b's goes second, not eleventh.
func TestStartGateFair(t *testing.T) {
	g := newStartGate(GateConfig{Limit: 1, MaxQueue: 100, MaxWait: 10 * time.Second}, 1)
	rel, _ := g.acquire(context.Background(), "a")
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(tenant string, i int) {
		defer wg.Done()
		r, err := g.acquire(context.Background(), tenant)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		order = append(order, fmt.Sprint(tenant, i))
		mu.Unlock()
		r()
	}
	for i := range 10 {
		wg.Add(1)
		go start("a", i)
		waitQueued(t, g, i+1)
	}
	wg.Add(1)
	go start("b", 0)
	waitQueued(t, g, 11)
	rel()
	wg.Wait()
	if len(order) != 11 || order[0] != "a0" || order[1] != "b0" {
		t.Fatalf("order %v: b's start should go right after a's first", order)
	}
}

func (g *startGate) state() (running, queued, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.queued, g.cfg.Limit
}

func waitQueued(t *testing.T, g *startGate, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, q, _ := g.state(); q == n {
			return
		}
	}
	t.Fatalf("never %d queued", n)
}

// TestBurstBeyondBoundLeavesNothing: with 1 start at a time and 2
// allowed to wait, a burst of 8 creates while a start hangs gets 429 with
// Retry-After for 5 of them, and those leave no record, no writable
// layer and no network behind; the 3 admitted ones run once starts go on.
func TestBurstBeyondBoundLeavesNothing(t *testing.T) {
	r := newRig(t)
	r.cfg.Gate = GateConfig{Limit: 1, MaxQueue: 2, MaxWait: 30 * time.Second}
	r2 := poolRigFrom(t, r) // no pools: the gate alone
	r.rt.block = make(chan struct{})
	type res struct {
		name string
		err  error
	}
	out := make(chan res, 8)
	for i := range 8 {
		name := fmt.Sprintf("b%d", i)
		go func() {
			_, _, err := plane(r2.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: name}, false)
			out <- res{name, err}
		}()
	}
	var refused []string
	for range 5 {
		x := <-out
		d, ok := errdefs.RetryAfter(x.err)
		if !ok || d < time.Second || api.HTTPStatus(x.err) != 429 {
			t.Fatalf("%s: want 429 with Retry-After, got %v", x.name, x.err)
		}
		refused = append(refused, x.name)
	}
	close(r.rt.block)
	for range 3 {
		if x := <-out; x.err != nil {
			t.Fatalf("admitted %s: %v", x.name, x.err)
		}
	}
	for _, n := range refused {
		if _, err := plane(r2.m).Get(ctx, n); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("refused %s left a record: %v", n, err)
		}
	}
	r.rfs.mu.Lock()
	mounted := len(r.rfs.mounted)
	r.rfs.mu.Unlock()
	r.net.mu.Lock()
	up := len(r.net.up)
	r.net.mu.Unlock()
	if mounted != 3 || up != 3 {
		t.Fatalf("%d rootfs and %d netns, want 3 each (the admitted creates)", mounted, up)
	}
}

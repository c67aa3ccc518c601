package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
)

// The store's cost per call against a local server (loopback TCP, the
// test server's durability settings: fsync off), for comparison with the
// SQLite store and as a floor for cluster figures. Run:
//
//	go test -run '^$' -bench . -benchtime 2s ./store/postgres

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), pgtest.DB(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	if _, err := s.Put(ctx, store.Sandbox{Name: "a", State: api.StateRunning}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "a"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPutUpdate(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	sb := store.Sandbox{Name: "a", State: api.StateRunning, Env: map[string]string{"K": "V"}}
	v, err := s.Put(ctx, sb)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		sb.Version = v
		if v, err = s.Put(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkObjectCommit4Keys(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	ws := []store.ObjectWrite{{Key: "a", Value: []byte(`1`)}, {Key: "b", Value: []byte(`2`)}, {Key: "c", Value: []byte(`3`)}, {Key: "d", Value: []byte(`4`)}}
	for b.Loop() {
		if err := s.ObjectCommit(ctx, "o", ws); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeaseRenew(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	l, err := s.AcquireLease(ctx, "k", "n1", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if l, err = s.RenewLease(ctx, l, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPutNode(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	n := store.Node{Name: "n1", Addr: "https://10.0.0.1:7071", Roles: []string{"control", "node"}, StartedAt: time.Now(),
		Images: make([]string, 20), Layers: map[string]int64{"aa": 1, "bb": 2}}
	for b.Loop() {
		if _, err := s.PutNode(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
}

package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestReopen checks that committed records survive closing and reopening.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, store.Sandbox{Name: "keep", State: api.StateSleeping}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Get(ctx, "keep")
	if err != nil || got.State != api.StateSleeping {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
}

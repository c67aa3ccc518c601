package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

func runVolumes(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	t.Run("Volumes", func(t *testing.T) {
		s := open(t)
		if _, err := s.GetVolume(ctx, "data"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get missing: want not found, got %v", err)
		}
		v := store.Volume{Name: "data", SizeBytes: 1 << 30, Node: "n1", CreatedAt: time.Now().UTC().Round(time.Millisecond)}
		ver, err := s.PutVolume(ctx, v)
		if err != nil || ver != 1 {
			t.Fatalf("insert: v=%d err=%v", ver, err)
		}
		if _, err := s.PutVolume(ctx, v); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("double insert: want already exists, got %v", err)
		}
		got, err := s.GetVolume(ctx, "data")
		if err != nil || got.SizeBytes != 1<<30 || got.Version != 1 || got.Node != "n1" || !got.CreatedAt.Equal(v.CreatedAt) {
			t.Fatalf("round trip: %+v %v", got, err)
		}
		got.Writer, got.Readers = "sb-a", []string{"sb-b"}
		if ver, err = s.PutVolume(ctx, got); err != nil || ver != 2 {
			t.Fatalf("update: v=%d err=%v", ver, err)
		}
		// A stale writer (still at version 1) is refused.
		if _, err := s.PutVolume(ctx, got); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("stale update: want failed precondition, got %v", err)
		}
		if _, err := s.PutVolume(ctx, store.Volume{Name: "a-snap", Snapshot: true, Origin: "data"}); err != nil {
			t.Fatal(err)
		}
		list, err := s.ListVolumes(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "a-snap" || !list[0].Snapshot || list[1].Writer != "sb-a" || len(list[1].Readers) != 1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := s.DeleteVolume(ctx, "data", 1); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Fatalf("stale delete: want failed precondition, got %v", err)
		}
		if err := s.DeleteVolume(ctx, "data", 2); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteVolume(ctx, "data", 2); err != nil {
			t.Fatalf("delete missing: %v", err)
		}
		if _, err := s.GetVolume(ctx, "data"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	})
	t.Run("VolumeWriterRace", func(t *testing.T) {
		// Many sandboxes claim the one writer slot from the same read:
		// exactly one wins.
		s := open(t)
		if _, err := s.PutVolume(ctx, store.Volume{Name: "v"}); err != nil {
			t.Fatal(err)
		}
		base, err := s.GetVolume(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				v := base
				v.Writer = string(rune('a' + i))
				if _, err := s.PutVolume(ctx, v); err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				} else if !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Errorf("racing claim: %v", err)
				}
			}(i)
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d claims won the writer slot, want 1", wins)
		}
	})
}

package local

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/store"
)

// TestCheckpointDue: only a running sandbox with persist interval is due,
// a period after its last checkpoint or, when it has none since it
// started, after its start.
func TestCheckpointDue(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	base := store.Sandbox{Persist: api.PersistInterval, PersistEvery: time.Minute, State: api.StateRunning, StartedAt: t0}
	for _, c := range []struct {
		name string
		mod  func(*store.Sandbox)
		at   time.Duration
		want bool
	}{
		{"before a period", func(*store.Sandbox) {}, 59 * time.Second, false},
		{"a period after start", func(*store.Sandbox) {}, time.Minute, true},
		{"a period after the last checkpoint", func(r *store.Sandbox) { r.LastCheckpoint = t0.Add(30 * time.Second) }, 90 * time.Second, true},
		{"within a period of the last checkpoint", func(r *store.Sandbox) { r.LastCheckpoint = t0.Add(30 * time.Second) }, 80 * time.Second, false},
		{"checkpoint from an earlier run counts from the start", func(r *store.Sandbox) { r.LastCheckpoint = t0.Add(-time.Hour) }, 30 * time.Second, false},
		{"sleeping", func(r *store.Sandbox) { r.State = api.StateSleeping }, time.Hour, false},
		{"persist disk", func(r *store.Sandbox) { r.Persist = api.PersistDisk }, time.Hour, false},
		{"no period", func(r *store.Sandbox) { r.PersistEvery = 0 }, time.Hour, false},
	} {
		r := base
		c.mod(&r)
		if got := checkpointDue(r, t0.Add(c.at)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

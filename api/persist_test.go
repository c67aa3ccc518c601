package api

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestParsePersistEvery: the period goes with persist interval only, is
// required there, and is bounded.
func TestParsePersistEvery(t *testing.T) {
	for _, c := range []struct {
		persist, every string
		want           time.Duration
		ok             bool
	}{
		{"", "", 0, true},
		{PersistDisk, "", 0, true},
		{PersistInterval, "5m", 5 * time.Minute, true},
		{PersistInterval, "10s", 10 * time.Second, true},
		{PersistInterval, "", 0, false},
		{PersistInterval, "9s", 0, false},
		{PersistInterval, "25h", 0, false},
		{PersistInterval, "soon", 0, false},
		{PersistDisk, "5m", 0, false},
		{"", "5m", 0, false},
	} {
		got, err := ParsePersistEvery(c.persist, c.every)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("%q %q: %s %v, want %s ok=%v", c.persist, c.every, got, err, c.want, c.ok)
		}
		if err != nil && !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q %q: %v, want invalid argument", c.persist, c.every, err)
		}
	}
}

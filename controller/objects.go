package controller

import (
	"context"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// SetSleepAfter changes how long the sandbox may stay idle before it is
// put to sleep (durable's Container.SetInactivityTimeout).
func (m *Manager) SetSleepAfter(ctx context.Context, name string, d time.Duration) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if d < time.Second || d > 30*24*time.Hour {
		return errdefs.InvalidArgument("inactivity timeout must be between 1s and 720h, got %s", d)
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return errdefs.NotFound("sandbox %q not found", name)
	}
	a.rec.SleepAfter = d
	return m.save(ctx, a)
}

package control

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/api"
)

// bootSlack widens "booted by this call" for a node whose clock runs a
// little behind the plane's: a call that comes within it of another's boot
// waits for the same readiness, which is harmless.
const bootSlack = time.Second

// awaitReady waits for sb's start command to be ready (its Ready probe)
// when the call that began at since created or booted the sandbox. A
// sandbox that was already running, or was thawed with its processes, is
// not waited for again: its readiness was the business of the call that
// booted it. The error keeps the probe's kind: a start command that
// exited first is failed precondition (409), a timeout deadline exceeded
// (504); the sandbox keeps running either way.
func (p *Plane) awaitReady(ctx context.Context, sb api.Sandbox, created bool, since time.Time) error {
	s := sb.Start
	if s == nil || s.Ready == nil || sb.State != api.StateRunning {
		return nil
	}
	if !created && (sb.StartedAt == nil || sb.StartedAt.Before(since.Add(-bootSlack))) {
		return nil
	}
	ag, release, err := p.use(ctx, sb.Name)
	if err != nil {
		return err
	}
	defer release()
	timeout := s.Ready.ReadyTimeoutMs()
	t0 := time.Now()
	if r := s.Ready.Port; r != nil {
		req := *r
		req.TimeoutMs = timeout
		_, err = ag.WaitForPort(ctx, api.StartProcessID, req)
	} else {
		req := *s.Ready.Log
		req.TimeoutMs = timeout
		_, err = ag.WaitForLog(ctx, api.StartProcessID, req)
	}
	if err != nil {
		return fmt.Errorf("sandbox %q runs, but its start command was not ready after %s: %w (its output: GET /v1/sandboxes/%s/processes/%s/logs)",
			sb.Name, time.Since(t0).Round(time.Millisecond), err, sb.Name, api.StartProcessID)
	}
	return nil
}

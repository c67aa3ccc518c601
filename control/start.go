package control

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
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
	switch r := s.Ready; {
	case r.Port != nil:
		req := *r.Port
		req.TimeoutMs = timeout
		_, err = ag.WaitForPort(ctx, api.StartProcessID, req)
	case r.Log != nil:
		req := *r.Log
		req.TimeoutMs = timeout
		_, err = ag.WaitForLog(ctx, api.StartProcessID, req)
	default:
		err = waitCommand(ctx, ag, *r.Command, time.Duration(timeout)*time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("sandbox %q runs, but its start command was not ready after %s: %w (its output: GET /v1/sandboxes/%s/processes/%s/logs)",
			sb.Name, time.Since(t0).Round(time.Millisecond), err, sb.Name, api.StartProcessID)
	}
	return nil
}

// waitCommand runs a readiness command until it exits 0, the start
// command's process ends (failed precondition, as the agent's waits
// answer) or timeout passes (deadline exceeded).
func waitCommand(ctx context.Context, ag *agentclient.Client, c api.ReadyCommand, timeout time.Duration) error {
	interval := min(max(time.Duration(c.IntervalMs)*time.Millisecond, 50*time.Millisecond), 10*time.Second)
	if c.IntervalMs == 0 {
		interval = 500 * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	var last api.ExitStatus
	var out bytes.Buffer
	for {
		out.Reset()
		try := min(readyTry, time.Until(deadline))
		st, err := ag.Exec(ctx, api.ExecRequest{Command: c.Command, TimeoutMs: max(try.Milliseconds(), 1)}, &out, &out)
		if err != nil {
			return err
		}
		if st.ExitCode == 0 && !st.TimedOut {
			return nil
		}
		last = st
		p, err := ag.GetProcess(ctx, api.StartProcessID)
		if err != nil {
			return err
		}
		if p.Status != api.ProcessRunning {
			return errdefs.FailedPrecondition("the start command ended (%s) before its ready command passed", p.Status)
		}
		if time.Until(deadline) < interval {
			return errdefs.New(errdefs.ErrDeadlineExceeded, "ready command %q did not exit 0 within %s (last exit %d: %.200q)", c.Command, timeout, last.ExitCode, out.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// readyTry bounds one run of a ready command.
const readyTry = 10 * time.Second

package local

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
)

// The compute side of controller objects (compute.go's helpers).

// entrypointID is the agent process id of StartOptions.Entrypoint.
const entrypointID = "entrypoint"

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

// status is the compute's Status: the public view, the activity the
// idle decision needs and, once it ended, the entrypoint's exit code.
func (m *Manager) status(ctx context.Context, name string) (node.Status, error) {
	if err := ValidName(name); err != nil {
		return node.Status{}, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return node.Status{}, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return node.Status{State: "destroyed"}, nil
	}
	sb := m.view(a)
	st := node.Status{Exists: true, Running: sb.State == api.StateRunning, State: sb.State, Error: sb.Error, OOM: sb.OOMKilled, Sandbox: sb}
	a.actMu.Lock()
	st.LastActive, st.Busy = a.lastActive, a.active > 0
	a.actMu.Unlock()
	if a.rec.ExitCode != nil {
		code := *a.rec.ExitCode
		st.ExitCode = &code
	}
	if st.OOM {
		code := 137
		st.ExitCode = &code
	}
	return st, nil
}

// startEntrypoint runs argv as the sandbox's entrypoint process.
func (m *Manager) startEntrypoint(ctx context.Context, name string, argv []string, env map[string]string) error {
	ag, release, err := m.agent(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	// exec: the entrypoint argv is the process itself (its pid, the
	// signals Signal sends and the exit code Monitor reports), not a
	// /bin/sh that forks it (shellJoin quotes every word, so the agent's
	// own exec of a simple command does not apply).
	if _, err := ag.StartProcess(ctx, api.StartProcessRequest{Command: "exec " + shellJoin(argv), ID: entrypointID, Env: env}); err != nil {
		return fmt.Errorf("start entrypoint: %w", err)
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	a.entrypoint = true
	run := a.rec.RunID
	a.mu.Unlock()
	go m.watchEntrypoint(name, ag, run)
	return nil
}

// watchEntrypoint waits for the entrypoint of run to end and then stops
// the container (it sleeps, keeping its files), as a container whose main
// process exits stops; Status then reports the exit code (128+n for a
// signal). It gives up when the agent goes away (the container stopped
// some other way) or the sandbox has moved on to another run.
func (m *Manager) watchEntrypoint(name string, ag *agentclient.Client, run string) {
	ctx := context.Background()
	for {
		p, err := ag.WaitForExit(ctx, entrypointID, time.Minute)
		if err != nil {
			return
		}
		if p.ExitCode == nil {
			continue // still running
		}
		a, err := m.lock(ctx, name)
		if err != nil {
			return
		}
		if !a.exists {
			m.drop(a) // destroyed meanwhile: lock made an empty actor
		}
		if a.exists && a.rec.RunID == run && a.rec.State == api.StateRunning {
			code := *p.ExitCode
			a.rec.ExitCode = &code // saved by the sleep, so a restart keeps it
			// Its main process ended: nothing is left to freeze.
			if err := m.sleepStop(ctx, a, fmt.Sprintf("entrypoint exited with %d", code)); err != nil {
				m.cfg.Logf("sandbox %s: stop after entrypoint exit: %v", name, err)
			}
		}
		a.mu.Unlock()
		return
	}
}

// signal delivers sig to the entrypoint when the sandbox has one (its
// exit code then shows in Status); without one, SIGTERM and SIGKILL stop
// the sandbox's main process (berth's agent), which puts it to sleep.
func (m *Manager) signal(ctx context.Context, name string, sig syscall.Signal) error {
	if err := ValidName(name); err != nil {
		return err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	if !a.exists {
		m.drop(a)
		a.mu.Unlock()
		return errdefs.NotFound("sandbox %q not found", name)
	}
	running := a.rec.State == api.StateRunning && a.agent != nil
	if running && a.entrypoint {
		// Under the actor lock: the watcher stops the container when the
		// entrypoint ends, which must not cut this call's answer off.
		_, err := a.agent.KillProcess(ctx, entrypointID, agentclient.KillOptions{Signal: strconv.Itoa(int(sig))})
		if err == nil || !errdefs.IsKind(err, errdefs.ErrNotFound) {
			a.mu.Unlock()
			return err
		}
	}
	a.mu.Unlock()
	switch sig {
	case syscall.SIGTERM, syscall.SIGKILL:
		_, err := m.stopSandbox(ctx, name, node.StopOptions{Reason: "signal " + strconv.Itoa(int(sig))})
		return err
	}
	return errdefs.InvalidArgument("signal %d: sandbox %q has no running entrypoint process; only 15 (SIGTERM) and 9 (SIGKILL) reach its main process, and stop it", sig, name)
}

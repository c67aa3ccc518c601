package agent_test

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ignoresTerm prints its pid and then ignores SIGTERM until SIGKILLed.
const ignoresTerm = `sh -c 'trap "" TERM; echo pid=$$; while :; do sleep 0.1; done'`

// TestProcessRecordIsTheCommand (issue 12 item 8): the record of a
// background process is the user's command, not the /bin/sh -c wrapper. A
// simple command is exec'd by the wrapper, so its pid is the record's; a
// command that ignores SIGTERM ends with SIGKILL (137) after the grace
// period, and wait-exit does not return while it runs.
func TestProcessRecordIsTheCommand(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	for _, tc := range []struct{ name, command string }{
		{"simple", ignoresTerm},                // exec'd: the record's pid is the command's
		{"compound", "cd / && " + ignoresTerm}, // the wrapper stays; its group is followed
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ptStart(t, c, api.StartProcessRequest{Command: tc.command})
			m, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: `pid=(\d+)`, Regex: true, TimeoutMs: 20000})
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(m.Groups[1])
			if tc.name == "simple" && pid != p.PID {
				t.Errorf("the record's pid is %d, the command's %d", p.PID, pid)
			}
			grace := 2 * time.Second
			start := time.Now()
			type res struct {
				in  api.ProcessInfo
				err error
			}
			killed := make(chan res, 1)
			go func() {
				in, err := c.KillProcess(ctx, p.ID, agentclient.KillOptions{Grace: grace})
				killed <- res{in, err}
			}()
			// While the command ignores SIGTERM, wait-exit does not return
			// and the record is running.
			if in, err := c.WaitForExit(ctx, p.ID, grace/2); !errors.Is(err, errdefs.ErrDeadlineExceeded) && time.Since(start) < grace {
				t.Fatalf("wait-exit returned %+v %v while the command ignoring SIGTERM still ran", in, err)
			}
			if in, err := c.GetProcess(ctx, p.ID); time.Since(start) < grace && (err != nil || in.Status != api.ProcessRunning) {
				t.Fatalf("during the grace period: %+v %v", in, err)
			}
			r := <-killed
			if r.err != nil {
				t.Fatal(r.err)
			}
			in := r.in
			if in.Status != api.ProcessKilled || in.Signal != "SIGKILL" || in.ExitCode == nil || *in.ExitCode != 137 {
				t.Fatalf("after SIGTERM→SIGKILL: %+v, want killed, SIGKILL, 137", in)
			}
			if ptAlive(pid) {
				t.Fatal("the record ended while the command still ran")
			}
			if w, err := c.WaitForExit(ctx, p.ID, 10*time.Second); err != nil || w.Signal != "SIGKILL" {
				t.Fatalf("wait-exit after the end: %+v %v", w, err)
			}
		})
	}
}

// TestProcessRecordFollowsBackgroundChildren: a command whose shell exits
// at once but leaves a job in its process group is still running until the
// job ends; a kill then ends the record with the signal that ended it.
func TestProcessRecordFollowsBackgroundChildren(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	p := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000 & echo started"})
	if _, err := c.WaitForLog(ctx, p.ID, api.WaitLogRequest{Pattern: "started", TimeoutMs: 20000}); err != nil {
		t.Fatal(err)
	}
	if in, err := c.WaitForExit(ctx, p.ID, time.Second); !errors.Is(err, errdefs.ErrDeadlineExceeded) {
		t.Fatalf("wait-exit returned %+v %v while its job still ran", in, err)
	}
	in, err := c.KillProcess(ctx, p.ID, agentclient.KillOptions{Grace: 10 * time.Second})
	if err != nil || in.Status != api.ProcessKilled || in.Signal != "SIGTERM" || in.ExitCode == nil || *in.ExitCode != 143 {
		t.Fatalf("kill: %+v %v, want killed by SIGTERM (143)", in, err)
	}
	// A job that ends by itself ends the record with the command's status.
	q := ptStart(t, c, api.StartProcessRequest{Command: "sleep 0.5 & exit 4"})
	start := time.Now()
	w, err := c.WaitForExit(ctx, q.ID, 30*time.Second)
	if err != nil || w.ExitCode == nil || *w.ExitCode != 4 || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("wait-exit: %+v %v after %v", w, err, time.Since(start))
	}
}

// TestProcessEndWithMain: with EndWithMain (the E2B face's choice, as envd
// does) the record ends with the main process while its job runs on.
func TestProcessEndWithMain(t *testing.T) {
	_, c := newClient(t)
	ctx := ptCtx(t)
	p := ptStart(t, c, api.StartProcessRequest{Command: "sleep 1000 & echo job=$!", EndWithMain: true})
	w, err := c.WaitForExit(ctx, p.ID, 30*time.Second)
	if err != nil || w.ExitCode == nil || *w.ExitCode != 0 {
		t.Fatalf("wait-exit: %+v %v", w, err)
	}
	logs, _ := c.ProcessLogs(ctx, p.ID)
	job, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(logs.Stdout), "job=")))
	if job <= 0 || !ptAlive(job) {
		t.Fatalf("the job (%q) should still run", logs.Stdout)
	}
	syscall.Kill(job, syscall.SIGKILL)
}

//go:build integration

package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestProcessRecordIsTheCommand (issue 12 item 8): a background command
// that ignores SIGTERM is not reported as killed by SIGTERM while it still
// runs; wait-exit waits for it, and the record ends with SIGKILL (137)
// after the grace period. Both a simple command (exec'd by the wrapper)
// and a compound one (the wrapper's group is followed).
func TestProcessRecordIsTheCommand(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-proc8"})
	const ignores = `sh -c 'trap "" TERM; echo pid=$$; while :; do sleep 0.1; done'`
	for _, cmd := range []string{ignores, "cd / && " + ignores} {
		p, err := d.c.StartProcess(ctx, "it-proc8", api.StartProcessRequest{Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		m, err := d.c.WaitForLog(ctx, "it-proc8", p.ID, api.WaitLogRequest{Pattern: `pid=(\d+)`, Regex: true, TimeoutMs: 20000})
		if err != nil {
			t.Fatal(err)
		}
		grace := 2 * time.Second
		start := time.Now()
		type res struct {
			in  api.ProcessInfo
			err error
		}
		killed := make(chan res, 1)
		go func() {
			in, err := d.c.KillProcess(ctx, "it-proc8", p.ID, client.KillOptions{Signal: "TERM", Grace: grace})
			killed <- res{in, err}
		}()
		if in, err := d.c.WaitForExit(ctx, "it-proc8", p.ID, grace/2); !errors.Is(err, errdefs.ErrDeadlineExceeded) && time.Since(start) < grace {
			t.Fatalf("%q: wait-exit returned %+v %v while the command still ran", cmd, in, err)
		}
		r := <-killed
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.in.Status != api.ProcessKilled || r.in.Signal != "SIGKILL" || r.in.ExitCode == nil || *r.in.ExitCode != 137 {
			t.Fatalf("%q: %+v, want killed by SIGKILL (137)", cmd, r.in)
		}
		if out := run(t, "it-proc8", "kill -0 "+m.Groups[1]+" 2>/dev/null && echo alive || echo gone"); strings.TrimSpace(out.Stdout) != "gone" {
			t.Fatalf("%q: the command outlived its record", cmd)
		}
	}
}

const itProbeEnv = `for v in IMG_DROP EMPTY KEEP GONE; do eval "printf '%s=%s;' $v \"\${$v-<unset>}\""; done`

// TestNullEnvIsUnset (issue 12 item 9): a null env value unsets the
// variable at sandbox create, exec, process start and session create.
func TestNullEnvIsUnset(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-envnull", Env: api.Env{"KEEP": "k", "EMPTY": "", "IMG_DROP": api.EnvUnset, "GONE": "set-by-sandbox"}})
	if sb, err := d.c.Get(ctx, "it-envnull"); err != nil || sb.Env["IMG_DROP"] != api.EnvUnset || sb.Env["KEEP"] != "k" {
		t.Fatalf("sandbox env: %q %v", sb.Env, err)
	}
	if r := run(t, "it-envnull", itProbeEnv); r.Stdout != "IMG_DROP=<unset>;EMPTY=;KEEP=k;GONE=set-by-sandbox;" {
		t.Fatalf("sandbox env in a command: %q", r.Stdout)
	}
	want := "IMG_DROP=<unset>;EMPTY=;KEEP=k;GONE=<unset>;"
	unset := api.Env{"GONE": api.EnvUnset}
	r, err := d.c.Exec(ctx, "it-envnull", api.ExecRequest{Command: itProbeEnv, Env: unset})
	if err != nil || r.Stdout != want {
		t.Fatalf("exec: %q %v", r.Stdout, err)
	}
	p, err := d.c.StartProcess(ctx, "it-envnull", api.StartProcessRequest{Command: itProbeEnv, Env: unset})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.WaitForExit(ctx, "it-envnull", p.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if logs, err := d.c.ProcessLogs(ctx, "it-envnull", p.ID); err != nil || string(logs.Stdout) != want {
		t.Fatalf("process: %q %v", logs.Stdout, err)
	}
	if _, err := d.c.CreateSession(ctx, "it-envnull", api.CreateSessionRequest{ID: "s", Env: unset}); err != nil {
		t.Fatal(err)
	}
	if sr, err := d.c.SessionExec(ctx, "it-envnull", "s", api.ExecRequest{Command: itProbeEnv}); err != nil || sr.Stdout != want {
		t.Fatalf("session: %q %v", sr.Stdout, err)
	}
}

// TestSessionPatch (issue 12 item 10): env set and unset on a live session
// through the public API, and a per-session default command timeout.
func TestSessionPatch(t *testing.T) {
	ctx := context.Background()
	sandbox(t, api.CreateSandboxRequest{Name: "it-sesspatch"})
	if _, err := d.c.CreateSession(ctx, "it-sesspatch", api.CreateSessionRequest{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.SessionExec(ctx, "it-sesspatch", "s", api.ExecRequest{Command: "cd /tmp && export GONE=1"}); err != nil {
		t.Fatal(err)
	}
	in, err := d.c.UpdateSession(ctx, "it-sesspatch", "s", api.UpdateSessionRequest{Env: api.Env{"GONE": api.EnvUnset, "KEEP": "k"}})
	if err != nil || in.Cwd != "/tmp" {
		t.Fatalf("patch env: %+v %v", in, err)
	}
	if sr, err := d.c.SessionExec(ctx, "it-sesspatch", "s", api.ExecRequest{Command: itProbeEnv + "; pwd"}); err != nil || sr.Stdout != "IMG_DROP=<unset>;EMPTY=<unset>;KEEP=k;GONE=<unset>;/tmp\n" {
		t.Fatalf("after the patch: %q %v", sr.Stdout, err)
	}
	ms := int64(500)
	if in, err := d.c.UpdateSession(ctx, "it-sesspatch", "s", api.UpdateSessionRequest{DefaultTimeoutMs: &ms}); err != nil || in.DefaultTimeoutMs != 500 {
		t.Fatalf("patch timeout: %+v %v", in, err)
	}
	start := time.Now()
	if sr, err := d.c.SessionExec(ctx, "it-sesspatch", "s", api.ExecRequest{Command: "sleep 60"}); err != nil || !sr.TimedOut || time.Since(start) > 30*time.Second {
		t.Fatalf("default timeout: %+v %v after %v", sr, err, time.Since(start))
	}
	if _, err := d.c.UpdateSession(ctx, "it-sesspatch", "s", api.UpdateSessionRequest{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("empty patch: %v", err)
	}
}

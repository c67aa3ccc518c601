package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// rawAgent posts a JSON body as written (so a null really is a null on
// the wire) to the agent and returns the status and body.
func rawAgent(t *testing.T, a *agenttest.Agent, method, path, body string) (int, []byte) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.Socket)
	}}}
	req, _ := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// framedStdout joins the stdout frames of an exec answer: each write of
// the command may arrive in a frame of its own.
func framedStdout(t *testing.T, body []byte) string {
	t.Helper()
	var out strings.Builder
	fr := wire.NewFrameReader(bytes.NewReader(body), 1<<20)
	for {
		typ, payload, err := fr.Next()
		if err == io.EOF {
			return out.String()
		}
		if err != nil {
			t.Fatalf("exec answer: %v (%q)", err, body)
		}
		if typ == wire.Stdout {
			out.Write(payload)
		}
	}
}

// probeEnv prints each variable or "<unset>".
const probeEnv = `for v in BERTH_BASE EMPTY GONE SET; do eval "printf '%s=%s;' $v \"\${$v-<unset>}\""; done`

const wantEnv = "BERTH_BASE=<unset>;EMPTY=;GONE=<unset>;SET=1;"

// TestNullEnvUnsetsEverywhere (issue 12 item 9): a null env value unsets
// the variable (BERTH_BASE comes from the agent's base env, as a sandbox's
// env does) in exec, process start, session create and a session command;
// "" still sets the variable to empty.
func TestNullEnvUnsetsEverywhere(t *testing.T) {
	a, c := newClient(t)
	ctx := ptCtx(t)
	env := `{"BERTH_BASE":null,"EMPTY":"","GONE":null,"SET":"1"}`

	// exec, with a literal null on the wire
	code, body := rawAgent(t, a, "POST", "/v1/exec", `{"command":`+jsonString(probeEnv)+`,"env":`+env+`}`)
	if out := framedStdout(t, body); code != 200 || out != wantEnv {
		t.Fatalf("exec: %d %q, want %s", code, out, wantEnv)
	}
	// and through the Go client (api.EnvUnset is sent as null)
	goEnv := api.Env{"BERTH_BASE": api.EnvUnset, "EMPTY": "", "GONE": api.EnvUnset, "SET": "1"}
	if out, _, _ := run(t, c, api.ExecRequest{Command: probeEnv, Env: goEnv}); out != wantEnv {
		t.Fatalf("exec via client: %q", out)
	}

	// process start
	code, body = rawAgent(t, a, "POST", "/v1/processes", `{"id":"envp","command":`+jsonString(probeEnv)+`,"env":`+env+`}`)
	if code != 201 {
		t.Fatalf("start: %d %s", code, body)
	}
	if _, err := c.WaitForExit(ctx, "envp", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if logs, err := c.ProcessLogs(ctx, "envp"); err != nil || string(logs.Stdout) != wantEnv {
		t.Fatalf("process: %q %v", logs.Stdout, err)
	}

	// session create
	code, body = rawAgent(t, a, "POST", "/v1/sessions", `{"id":"envs","env":`+env+`}`)
	if code != 201 {
		t.Fatalf("session create: %d %s", code, body)
	}
	if out, _, _ := stExec(t, c, "envs", api.ExecRequest{Command: probeEnv}); out != wantEnv {
		t.Fatalf("session: %q", out)
	}

	// a session command's own env: the session's export is unset for that
	// command only
	stSession(t, c, api.CreateSessionRequest{ID: "envs2"})
	stExec(t, c, "envs2", api.ExecRequest{Command: "export GONE=there BERTH_BASE=b"})
	if out, _, _ := stExec(t, c, "envs2", api.ExecRequest{Command: probeEnv, Env: goEnv}); out != wantEnv {
		t.Fatalf("session command env: %q", out)
	}
	if out, _, _ := stExec(t, c, "envs2", api.ExecRequest{Command: `echo "$GONE"`}); out != "there\n" {
		t.Fatalf("the command's env leaked into the session: %q", out)
	}
	// a process started from the session, unsetting one of its exports
	p := ptStart(t, c, api.StartProcessRequest{Command: probeEnv, SessionID: "envs2", Env: goEnv})
	if _, err := c.WaitForExit(ctx, p.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if logs, _ := c.ProcessLogs(ctx, p.ID); string(logs.Stdout) != wantEnv {
		t.Fatalf("process from a session: %q", logs.Stdout)
	}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestSessionUpdateEnvAndDefaultTimeout (issue 12 item 10): variables are
// set and unset on a live session (and survive a shell restart), and a
// session's default timeout applies to commands that set none.
func TestSessionUpdateEnvAndDefaultTimeout(t *testing.T) {
	a, c := newClient(t)
	ctx := ptCtx(t)
	stSession(t, c, api.CreateSessionRequest{ID: "upd"})
	stExec(t, c, "upd", api.ExecRequest{Command: "cd / && export GONE=1"})
	code, body := rawAgent(t, a, "PATCH", "/v1/sessions/upd", `{"env":{"SET":"1","EMPTY":"","GONE":null,"BERTH_BASE":null}}`)
	if code != 200 {
		t.Fatalf("patch: %d %s", code, body)
	}
	if out, _, _ := stExec(t, c, "upd", api.ExecRequest{Command: probeEnv + "; pwd"}); out != wantEnv+"/\n" {
		t.Fatalf("after the patch: %q (the shell's own state, cwd /, must stay)", out)
	}
	// A shell that dies restarts with the patched environment.
	stExec(t, c, "upd", api.ExecRequest{Command: "exit 7"})
	if out, _, st := stExec(t, c, "upd", api.ExecRequest{Command: probeEnv}); out != wantEnv || !st.Restarted {
		t.Fatalf("after a restart: %q %+v", out, st)
	}
	if _, err := c.UpdateSession(ctx, "upd", api.UpdateSessionRequest{Env: api.Env{"bad-name": "x"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := c.UpdateSession(ctx, "nope", api.UpdateSessionRequest{Env: api.Env{"A": "1"}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing session: %v", err)
	}

	// Default timeout: at create, overridden per command, changed by patch.
	info := stSession(t, c, api.CreateSessionRequest{ID: "tmo", DefaultTimeoutMs: 300})
	if info.DefaultTimeoutMs != 300 {
		t.Fatalf("info %+v", info)
	}
	start := time.Now()
	if _, _, st := stExec(t, c, "tmo", api.ExecRequest{Command: "sleep 30"}); !st.TimedOut || time.Since(start) > 20*time.Second {
		t.Fatalf("default timeout: %+v after %v", st, time.Since(start))
	}
	if _, _, st := stExec(t, c, "tmo", api.ExecRequest{Command: "sleep 1", TimeoutMs: 20000}); st.TimedOut || st.ExitCode != 0 {
		t.Fatalf("own timeout: %+v", st)
	}
	zero := int64(0)
	if in, err := c.UpdateSession(ctx, "tmo", api.UpdateSessionRequest{DefaultTimeoutMs: &zero}); err != nil || in.DefaultTimeoutMs != 0 {
		t.Fatalf("patch timeout: %+v %v", in, err)
	}
	if _, _, st := stExec(t, c, "tmo", api.ExecRequest{Command: "sleep 1"}); st.TimedOut || st.ExitCode != 0 {
		t.Fatalf("after removing the default: %+v", st)
	}
	neg := int64(-1)
	if _, err := c.UpdateSession(ctx, "tmo", api.UpdateSessionRequest{DefaultTimeoutMs: &neg}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("negative timeout: %v", err)
	}
	if _, err := c.CreateSession(ctx, api.CreateSessionRequest{DefaultTimeoutMs: -5}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("negative timeout at create: %v", err)
	}
}

// TestNullEnvInCodeContexts (issue 12 item 9): null unsets in code
// contexts too, at create (for the interpreter's life) and per run (for
// that run only), in python, javascript and bash. LOGNAME and LANG are
// always in a command's env, so only an unset removes them.
func TestNullEnvInCodeContexts(t *testing.T) {
	probes := map[string]string{
		api.LangPython:     `import os; print(*(os.environ.get(k, '<unset>') for k in ('LOGNAME', 'LANG', 'SET')))`,
		api.LangJavaScript: `console.log(['LOGNAME', 'LANG', 'SET'].map(k => process.env[k] ?? '<unset>').join(' '))`,
		api.LangBash:       `echo "${LOGNAME-<unset>} ${LANG-<unset>} ${SET-<unset>}"`,
	}
	for lang, probe := range probes {
		t.Run(lang, func(t *testing.T) {
			var c *agentclient.Client
			switch lang {
			case api.LangPython:
				_, c = newPyClient(t)
			case api.LangJavaScript:
				needInterp(t, "node")
				_, c = newClient(t)
			default:
				needInterp(t, "bash")
				_, c = newClient(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cc, err := c.CreateCodeContext(ctx, api.CreateCodeContextRequest{Language: lang, Env: api.Env{"LOGNAME": api.EnvUnset}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.DeleteCodeContext(context.Background(), cc.ID)
			out := func(env api.Env) string {
				res, err := c.RunCode(ctx, api.RunCodeRequest{Context: cc.ID, Code: probe, Env: env}, nil)
				if err != nil || res.Error != nil {
					t.Fatalf("run: %v %+v", err, res.Error)
				}
				return strings.TrimSpace(strings.Join(res.Logs.Stdout, ""))
			}
			if got := out(api.Env{"LANG": api.EnvUnset, "SET": "1"}); got != "<unset> <unset> 1" {
				t.Fatalf("run with LANG null: %q", got)
			}
			if got := out(nil); got != "<unset> C.UTF-8 <unset>" {
				t.Fatalf("next run (the run's env undone, the context's kept): %q", got)
			}
		})
	}
}

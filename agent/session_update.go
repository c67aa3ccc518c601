package agent

import (
	"bytes"
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxSessionEnv bounds the variables one session update sets.
const maxSessionEnv = 1024

// checkSessionEnv validates env for a session's shell: shell names, values
// without NUL (null, api.EnvUnset, means unset).
func checkSessionEnv(env api.Env) error {
	if len(env) > maxSessionEnv {
		return errdefs.InvalidArgument("env has %d variables, max %d", len(env), maxSessionEnv)
	}
	for k, v := range env {
		if !child.ValidShellName(k) || (v != api.EnvUnset && strings.IndexByte(v, 0) >= 0) {
			return errdefs.InvalidArgument("invalid environment variable %q", k)
		}
	}
	return nil
}

// envScript is the shell text that exports env's variables and unsets its
// null ones, in a stable order.
func envScript(env api.Env) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		if v := env[k]; v == api.EnvUnset {
			b.WriteString(" unset " + k + "\n")
		} else {
			b.WriteString(" export " + k + "=" + child.ShellQuote(v) + "\n")
		}
	}
	return b.String()
}

// handleUpdateSession sets and unsets variables in a live session's shell
// and changes its default command timeout.
func (m *procManager) handleUpdateSession(w http.ResponseWriter, r *http.Request) {
	sess, err := m.session(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	var req api.UpdateSessionRequest
	if err := httpio.DecodeJSON(w, r, maxCommandBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	if err := sess.update(r.Context(), &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusOK, sess.info())
}

func (sess *session) update(ctx context.Context, req *api.UpdateSessionRequest) error {
	if err := checkSessionEnv(req.Env); err != nil {
		return err
	}
	if t := req.DefaultTimeoutMs; t != nil && (*t < 0 || *t > child.MaxTimeoutMs) {
		return errdefs.InvalidArgument("defaultTimeoutMs %d out of range [0, %d]", *t, int64(child.MaxTimeoutMs))
	}
	if len(req.Env) > 0 {
		// In the shell itself (not a subshell), so it persists like a
		// user's own export; after a running command, in order.
		quit := make(chan struct{})
		defer close(quit)
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		run, err := sess.run(ctx, shellCommand{text: envScript(req.Env)}, quit)
		if err != nil {
			return err
		}
		var stderr bytes.Buffer
		for c := range run.out {
			if c.t == wire.Stderr && stderr.Len() < 4096 {
				stderr.Write(c.p)
			}
		}
		if run.err != nil {
			return run.err
		}
		if run.result.ExitCode != 0 || run.result.ShellExited {
			return errdefs.FailedPrecondition("session %s: setting the environment failed (exit %d): %s",
				sess.id, run.result.ExitCode, strings.TrimSpace(stderr.String()))
		}
		// A shell that restarts starts with the new environment too.
		sess.mu.Lock()
		env := make(map[string]string, len(sess.env))
		for _, kv := range sess.env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		req.Env.ApplyTo(env)
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sess.env = sess.env[:0:0]
		for _, k := range keys {
			sess.env = append(sess.env, k+"="+env[k])
		}
		sess.mu.Unlock()
	}
	if t := req.DefaultTimeoutMs; t != nil {
		sess.mu.Lock()
		sess.defaultTimeout = time.Duration(*t) * time.Millisecond
		sess.mu.Unlock()
	}
	return nil
}

package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The code interpreter (port 49999): E2B's /execute and /contexts on berth's
// interpreter contexts.

type contextBody struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextOf(c api.CodeContext) contextBody {
	return contextBody{ID: c.ID, Language: c.Language, Cwd: c.Cwd}
}

// language maps E2B language names onto berth's; "" is python.
func language(l string) (string, error) {
	switch strings.ToLower(l) {
	case "", "python", "python3":
		return api.LangPython, nil
	case "js", "javascript", "node":
		return api.LangJavaScript, nil
	case "ts", "typescript":
		return api.LangTypeScript, nil
	case "bash", "sh", "shell":
		return api.LangBash, nil
	case "r", "java":
		return strings.ToLower(l), nil // the agent says why it cannot run them
	}
	return "", errdefs.InvalidArgument("language %q is not supported by berth's code interpreter (python, javascript, typescript, bash)", l)
}

func (h *Handler) serveInterpreter(w http.ResponseWriter, r *http.Request, id string) {
	p := r.URL.Path
	var err error
	switch {
	case p == "/health" && r.Method == http.MethodGet:
		if sb, lerr := h.lookup(r.Context(), id); lerr != nil || sb.State != api.StateRunning {
			writeGone(w, id)
			return
		}
		writeJSON(w, http.StatusOK, "OK")
		return
	case p == "/execute" && r.Method == http.MethodPost:
		if !h.tokenOK(id, r.Header.Get("X-Access-Token")) {
			writeJSON(w, http.StatusUnauthorized, apiError{Code: 401, Message: "unauthorized access, please provide a valid access token"})
			return
		}
		err = h.execute(w, r, id)
	case p == "/contexts" && r.Method == http.MethodPost:
		err = h.createContext(w, r, id)
	case p == "/contexts" && r.Method == http.MethodGet:
		err = h.listContexts(w, r, id)
	case strings.HasPrefix(p, "/contexts/"):
		rest := strings.TrimPrefix(p, "/contexts/")
		cid, action, _ := strings.Cut(rest, "/")
		switch {
		case action == "" && r.Method == http.MethodDelete:
			err = h.contextOp(w, r, id, cid, false)
		case action == "restart" && r.Method == http.MethodPost:
			err = h.contextOp(w, r, id, cid, true)
		default:
			err = errdefs.NotFound("no route %s %s on the code interpreter", r.Method, p)
		}
	default:
		err = errdefs.NotFound("no route %s %s on the code interpreter", r.Method, p)
	}
	if err != nil {
		writeFileErr(w, id, err)
	}
}

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request, id string) error {
	var body struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
		// User is E2B's interpreter server's choice of kernel account
		// ("root" or the default "user"); the pinned SDKs do not send it.
		User string `json:"user"`
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxControlBody)
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	lang, err := language(body.Language)
	if err != nil {
		return err
	}
	cwd := homeDir
	if body.Cwd != "" {
		cwd = resolvePath(body.Cwd)
	}
	ag, release, err := h.agent(r.Context(), id)
	if err != nil {
		return err
	}
	defer release()
	c, err := ag.CreateCodeContext(r.Context(), api.CreateCodeContextRequest{Language: lang, Cwd: cwd, User: body.User})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, contextOf(c))
	return nil
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request, id string) error {
	ag, release, err := h.agent(r.Context(), id)
	if err != nil {
		return err
	}
	defer release()
	cs, err := ag.ListCodeContexts(r.Context())
	if err != nil {
		return err
	}
	out := []contextBody{}
	for _, c := range cs {
		out = append(out, contextOf(c))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) contextOp(w http.ResponseWriter, r *http.Request, id, cid string, restart bool) error {
	ag, release, err := h.agent(r.Context(), id)
	if err != nil {
		return err
	}
	defer release()
	if restart {
		_, err = ag.RestartCodeContext(r.Context(), cid)
	} else {
		err = ag.DeleteCodeContext(r.Context(), cid)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// execute is POST /execute: it streams NDJSON lines (stdout, stderr,
// result, error, number_of_executions, end_of_execution) as the code runs.
func (h *Handler) execute(w http.ResponseWriter, r *http.Request, id string) error {
	var body struct {
		Code      string            `json:"code"`
		ContextID string            `json:"context_id"`
		Language  string            `json:"language"`
		EnvVars   map[string]string `json:"env_vars"`
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<20)
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	req := api.RunCodeRequest{Code: body.Code, Context: body.ContextID, Env: body.EnvVars}
	if body.ContextID == "" {
		lang, err := language(body.Language)
		if err != nil {
			return err
		}
		req.Language = lang
	}
	// A kill or pause ends the run with an error line and a clean end of
	// the stream.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer h.register(id, cancel)()
	ag, release, err := h.agent(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	rc := http.NewResponseController(w)
	var mu sync.Mutex // line and the keepalive ticker
	started := false
	var buf bytes.Buffer
	start := func() {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			started = true
			rc.Flush()
		}
	}
	line := func(v any) {
		mu.Lock()
		defer mu.Unlock()
		start()
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(v)
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(buf.Bytes()); err != nil || rc.Flush() != nil {
			cancel(errClientGone) // interrupts the code
		}
	}
	// The headers go out as soon as the agent took the run, so the SDK's
	// own execution timeout (timeoutMs, which it starts at the headers)
	// applies to a cell that prints nothing; keepalive lines (a line type
	// of E2B's protocol, ignored by the SDKs) keep idle streams alive
	// through proxies and find a vanished client.
	stopKeepalive := make(chan struct{})
	var keepalive sync.WaitGroup
	defer keepalive.Wait()
	defer close(stopKeepalive)
	onStart := func() {
		mu.Lock()
		start()
		mu.Unlock()
		keepalive.Add(1)
		go func() {
			defer keepalive.Done()
			t := time.NewTicker(executeKeepalive)
			defer t.Stop()
			for {
				select {
				case <-stopKeepalive:
					return
				case <-t.C:
					line(map[string]any{"type": "keepalive"})
				}
			}
		}()
	}
	now := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	_, err = ag.RunCodeStarted(ctx, req, onStart, func(ev api.CodeEvent) {
		switch ev.Type {
		case api.CodeEventStdout, api.CodeEventStderr:
			line(map[string]any{"type": ev.Type, "text": ev.Text, "timestamp": now()})
		case api.CodeEventResult:
			if res := ev.Result; res != nil {
				line(resultFields(res))
			}
		case api.CodeEventError:
			if e := ev.Error; e != nil {
				line(map[string]any{"type": "error", "name": e.Name, "value": e.Value, "traceback": e.Traceback})
			}
		case api.CodeEventComplete:
			line(map[string]any{"type": "number_of_executions", "execution_count": ev.ExecutionCount})
			line(map[string]any{"type": "end_of_execution"})
		}
	})
	if err == nil {
		return nil
	}
	mu.Lock()
	wasStarted := started
	mu.Unlock()
	cause := context.Cause(ctx)
	if cause != nil && errors.Is(cause, errClientGone) {
		return nil
	}
	if !wasStarted {
		if cause != nil && errors.Is(cause, errSandboxGone) {
			writeGone(w, id)
			return nil
		}
		return err
	}
	var kind *errdefs.Error
	name, value := "UnexpectedEndOfExecution", err.Error()
	switch {
	case cause != nil && errors.Is(cause, errSandboxGone):
		name, value = "SandboxKilled", "the sandbox was killed or paused while the code ran; its interpreter state is gone"
	case errors.As(err, &kind) && errdefs.IsKind(err, errdefs.ErrDeadlineExceeded):
		name = "TimeoutError"
	}
	line(map[string]any{"type": "error", "name": name, "value": value, "traceback": name + ": " + value})
	line(map[string]any{"type": "unexpected_end_of_execution"})
	return nil
}

// streamWriteTimeout bounds one write to a caller that stopped reading.
const streamWriteTimeout = 30 * time.Second

// executeKeepalive spaces the keepalive lines of an idle /execute stream.
const executeKeepalive = 10 * time.Second

// errClientGone cancels a run whose caller stopped reading.
var errClientGone = errors.New("the client went away")

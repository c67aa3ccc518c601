package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
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
	}
	return "", errdefs.InvalidArgument("language %q is not supported by berth's code interpreter (python, javascript, typescript)", l)
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
	c, err := ag.CreateCodeContext(r.Context(), api.CreateCodeContextRequest{Language: lang, Cwd: cwd})
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

// resultLine is one NDJSON "result" line: the MIME representations, with
// the field names of E2B's interpreter.
type resultLine struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	JavaScript   string          `json:"javascript,omitempty"`
	IsMainResult bool            `json:"is_main_result"`
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
	// A kill or pause ends the run: the connection is cut, and the SDK's
	// health probe (502) then reports the sandbox as gone.
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	defer h.register(id, cancel)()
	ag, release, err := h.agent(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	rc := http.NewResponseController(w)
	started := false
	var buf bytes.Buffer
	line := func(v any) {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(v)
		w.Write(buf.Bytes())
		rc.Flush()
	}
	now := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	_, err = ag.RunCode(ctx, req, func(ev api.CodeEvent) {
		switch ev.Type {
		case api.CodeEventStdout, api.CodeEventStderr:
			line(map[string]any{"type": ev.Type, "text": ev.Text, "timestamp": now()})
		case api.CodeEventResult:
			if res := ev.Result; res != nil {
				line(resultLine{Type: "result", Text: res.Text, HTML: res.HTML, Markdown: res.Markdown, SVG: res.SVG,
					PNG: res.PNG, JPEG: res.JPEG, LaTeX: res.LaTeX, JSON: res.JSON, JavaScript: res.JavaScript,
					IsMainResult: res.IsMainResult})
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
	if c := context.Cause(ctx); c != nil && errors.Is(c, errSandboxGone) {
		if !started {
			writeGone(w, id)
			return nil
		}
		panic(http.ErrAbortHandler)
	}
	if !started {
		return err
	}
	var kind *errdefs.Error
	name := "UnexpectedEndOfExecution"
	if errors.As(err, &kind) && errors.Is(err, errdefs.ErrDeadlineExceeded) {
		name = "TimeoutError"
	}
	line(map[string]any{"type": "error", "name": name, "value": err.Error(), "traceback": ""})
	line(map[string]any{"type": "unexpected_end_of_execution"})
	return nil
}

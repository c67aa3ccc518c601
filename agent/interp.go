package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/evanw/esbuild/pkg/api"

	berthapi "github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Code contexts (interp*.go) are persistent interpreters, as in a notebook:
// each context is one long-lived python3 or node process, started through
// the reaper, running an embedded kernel script (kernels/). Runs of one
// context are serialized; contexts run in parallel.
//
// Interrupts: a timeout or a cancelled request sends SIGINT. Python raises
// KeyboardInterrupt in the running code and the context survives with its
// state. Node breaks synchronous code (vm breakOnSigint) and abandons a
// pending top-level await (timers it started keep running). Code that
// ignores the interrupt (a C extension that never checks signals, a
// synchronous loop after an await in JS) is killed after interruptGrace;
// the context then starts a fresh interpreter on its next run, with its
// state lost, and the run's error says so.
//
// TypeScript is transpiled inside the agent with esbuild's Transform API
// (types erased, nothing type-checked), then runs like JavaScript. esbuild
// is the agent's one dependency beyond the standard library and x/sys
// (pure Go, about 4 MB of binary); only Transform is used.
//
// JavaScript limits: declarations persist through a lexical rewrite (kernel
// script), not a parser: const/let become var, so they can be redeclared and
// a const can be reassigned in a later run.

const (
	// interruptGrace is how long interrupted code has to stop before the
	// interpreter is killed.
	interruptGrace = 3 * time.Second
	// maxContexts bounds the interpreters one sandbox may run at once.
	maxContexts = 64
	maxCodeBody = 16 << 20
	// CodeContentType is the media type of a streamed code run: one JSON
	// api.CodeEvent a line.
	CodeContentType = "application/x-ndjson"
)

type codeContext struct {
	id, language, cwd string
	user              string // account name the interpreter runs as
	env               map[string]string
	createdAt         time.Time

	run sync.Mutex // one run at a time; held while k is used
	mu  sync.Mutex // guards k and deleted
	k   *kernel
	// deleted is set by delete; a run waiting on run must not restart it.
	deleted bool
}

func (c *codeContext) info() berthapi.CodeContext {
	return berthapi.CodeContext{ID: c.id, Language: c.language, Cwd: c.cwd, User: c.user, CreatedAt: c.createdAt}
}

type interpManager struct {
	s        *Server
	mu       sync.Mutex
	ctxs     map[string]*codeContext
	defaults map[string]string // language → id of its default context
}

// addInterpRoutes adds the code context endpoints. Needs s.http, to stop
// the interpreters when the server shuts down.
func (s *Server) addInterpRoutes() {
	m := &interpManager{s: s, ctxs: make(map[string]*codeContext), defaults: make(map[string]string)}
	s.mux.HandleFunc("POST /v1/code/contexts", m.handleCreate)
	s.mux.HandleFunc("GET /v1/code/contexts", m.handleList)
	s.mux.HandleFunc("DELETE /v1/code/contexts/{id}", m.handleDelete)
	s.mux.HandleFunc("POST /v1/code/contexts/{id}/restart", m.handleRestart)
	s.mux.HandleFunc("POST /v1/code/run", m.handleRun)
	s.http.RegisterOnShutdown(m.closeAll)
}

func normLanguage(l string) (string, error) {
	switch l {
	case "", "python", "python3", "py":
		return berthapi.LangPython, nil
	case "javascript", "js", "node":
		return berthapi.LangJavaScript, nil
	case "typescript", "ts":
		return berthapi.LangTypeScript, nil
	}
	return "", errdefs.InvalidArgument("unsupported language %q (python, javascript or typescript)", l)
}

// create starts a new context and its interpreter.
func (m *interpManager) create(req berthapi.CreateCodeContextRequest) (*codeContext, error) {
	lang, err := normLanguage(req.Language)
	if err != nil {
		return nil, err
	}
	for k, v := range req.Env {
		if k == "" || len(k)+len(v) > 128<<10 {
			return nil, errdefs.InvalidArgument("invalid environment variable %q", k)
		}
	}
	c := &codeContext{id: newID(), language: lang, env: req.Env, createdAt: time.Now().UTC()}
	acct, err := m.s.resolveUser(req.User)
	if err != nil {
		return nil, err
	}
	c.user = acct.name
	c.cwd = acct.home
	if req.Cwd != "" {
		if c.cwd, err = resolvePath(req.Cwd, acct.home); err != nil {
			return nil, err
		}
	} else if fi, err := os.Stat(c.cwd); err != nil || !fi.IsDir() {
		c.cwd = "/"
	}
	m.mu.Lock()
	if len(m.ctxs) >= maxContexts {
		m.mu.Unlock()
		return nil, errdefs.ResourceExhausted("the sandbox already has %d code contexts; delete one first", maxContexts)
	}
	m.ctxs[c.id] = c
	m.mu.Unlock()
	k, err := m.s.startKernel(c)
	if err != nil {
		m.mu.Lock()
		delete(m.ctxs, c.id)
		m.mu.Unlock()
		return nil, err
	}
	c.mu.Lock()
	c.k = k
	c.mu.Unlock()
	return c, nil
}

func (m *interpManager) get(id string) (*codeContext, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.ctxs[id]
	if !ok {
		return nil, errdefs.NotFound("code context %q not found", id)
	}
	return c, nil
}

// defaultFor returns the default context of language, creating it.
func (m *interpManager) defaultFor(language string) (*codeContext, error) {
	lang, err := normLanguage(language)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if c, ok := m.ctxs[m.defaults[lang]]; ok {
		m.mu.Unlock()
		return c, nil
	}
	m.mu.Unlock()
	c, err := m.create(berthapi.CreateCodeContextRequest{Language: lang})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if other, ok := m.ctxs[m.defaults[lang]]; ok { // lost a race: keep the first
		delete(m.ctxs, c.id)
		go c.stop()
		return other, nil
	}
	m.defaults[lang] = c.id
	return c, nil
}

// stop kills the context's interpreter.
func (c *codeContext) stop() {
	c.mu.Lock()
	k := c.k
	c.k = nil
	c.mu.Unlock()
	if k != nil {
		k.kill()
	}
}

func (m *interpManager) closeAll() {
	m.mu.Lock()
	all := make([]*codeContext, 0, len(m.ctxs))
	for id, c := range m.ctxs {
		all = append(all, c)
		delete(m.ctxs, id)
	}
	m.mu.Unlock()
	for _, c := range all {
		c.mu.Lock()
		c.deleted = true
		c.mu.Unlock()
		c.stop()
	}
}

func (m *interpManager) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req berthapi.CreateCodeContextRequest
	if err := decodeJSON(w, r, maxSmallBody, &req); err != nil {
		writeError(w, err)
		return
	}
	c, err := m.create(req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, c.info())
}

func (m *interpManager) handleList(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	list := make([]berthapi.CodeContext, 0, len(m.ctxs))
	for _, c := range m.ctxs {
		list = append(list, c.info())
	}
	m.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt.Before(list[j].CreatedAt) })
	writeJSON(w, http.StatusOK, berthapi.CodeContextList{Contexts: list})
}

func (m *interpManager) handleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m.mu.Lock()
	c, ok := m.ctxs[id]
	delete(m.ctxs, id)
	m.mu.Unlock()
	if !ok {
		writeError(w, errdefs.NotFound("code context %q not found", id))
		return
	}
	c.mu.Lock()
	c.deleted = true
	c.mu.Unlock()
	c.stop() // a run in progress sees the interpreter die and ends
	w.WriteHeader(http.StatusNoContent)
}

// handleRestart replaces the interpreter, clearing all state. A run in
// progress is killed with it.
func (m *interpManager) handleRestart(w http.ResponseWriter, r *http.Request) {
	c, err := m.get(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	c.stop()
	c.run.Lock()
	defer c.run.Unlock()
	if err := m.ensureKernel(c, true); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c.info())
}

// ensureKernel starts an interpreter for c if it has none (or a dead one).
// The caller holds c.run.
func (m *interpManager) ensureKernel(c *codeContext, fresh bool) error {
	c.mu.Lock()
	k, deleted := c.k, c.deleted
	c.mu.Unlock()
	if deleted {
		return errdefs.NotFound("code context %q was deleted", c.id)
	}
	if k != nil && k.alive() && !fresh {
		return nil
	}
	if k != nil {
		c.stop()
	}
	nk, err := m.s.startKernel(c)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deleted {
		go nk.kill()
		return errdefs.NotFound("code context %q was deleted", c.id)
	}
	c.k = nk
	return nil
}

// transpileTS turns TypeScript into JavaScript with esbuild (types are
// erased, nothing is type-checked), keeping top-level await and script
// semantics so declarations persist like in a JS context.
func transpileTS(code string) (string, *berthapi.CodeError) {
	res := api.Transform(code, api.TransformOptions{
		Loader: api.LoaderTS,
		Target: api.ESNext,
	})
	if len(res.Errors) > 0 {
		msgs := api.FormatMessages(res.Errors, api.FormatMessagesOptions{Kind: api.ErrorMessage})
		e := res.Errors[0]
		return "", &berthapi.CodeError{Name: "SyntaxError", Value: e.Text, Traceback: joinLines(msgs)}
	}
	return string(res.Code), nil
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += l
	}
	return out
}

// eventWriter writes NDJSON events, flushing each. After the client goes
// away it drops writes (the run still has to reach its complete event).
type eventWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	dead bool
}

func (ew *eventWriter) write(ev any) {
	if ew.dead {
		return
	}
	data, _ := json.Marshal(ev)
	ew.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := ew.w.Write(append(data, '\n')); err != nil || ew.rc.Flush() != nil {
		ew.dead = true
	}
}

// interrupt asks the running code to stop.
func (k *kernel) interrupt() { k.signal(syscall.SIGINT) }

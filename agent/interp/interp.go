package interp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	berthapi "github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	// interruptGrace is how long interrupted code has to stop before the
	// interpreter is killed.
	interruptGrace = 3 * time.Second
	// interruptSettle bounds the end of a run whose code did stop at the
	// interrupt (its error was reported) before the interpreter is killed.
	interruptSettle = 30 * time.Second
	// maxContexts bounds the interpreters one sandbox may run at once.
	maxContexts = 64
	maxCodeBody = 16 << 20
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

// Config is what code contexts need from the agent.
type Config struct {
	// Prepare resolves an interpreter as an exec would, with the
	// credential to start it with (nil: run as the agent's own user).
	Prepare func(req *berthapi.ExecRequest) (*child.Command, *syscall.Credential, error)
	// Start starts a prepared command through the agent's reaper (the
	// agent is PID 1 and must own every wait status). Its error is already
	// an errdefs kind.
	Start func(c *child.Command, attr *syscall.ProcAttr) (pid int, exited <-chan child.Exit, err error)
	// User resolves a user spec (empty: the agent's default user) to the
	// user's name and home.
	User func(spec string) (name, home string, err error)
	// HasProgram reports whether name is on the PATH commands get.
	HasProgram func(name string) bool
	// Heartbeat is how often an idle run's stream carries a heartbeat.
	Heartbeat time.Duration
}

// Contexts is the set of code contexts of one agent.
type Contexts struct {
	cfg      Config
	mu       sync.Mutex
	ctxs     map[string]*codeContext
	defaults map[string]string // language → id of its default context
}

// New returns an empty set of code contexts. The agent serves them on
// POST /v1/code/contexts (HandleCreate), GET /v1/code/contexts
// (HandleList), DELETE /v1/code/contexts/{id} (HandleDelete),
// POST /v1/code/contexts/{id}/restart (HandleRestart) and POST /v1/code/run
// (HandleRun), and calls CloseAll at shutdown to stop the interpreters.
func New(cfg Config) *Contexts {
	return &Contexts{cfg: cfg, ctxs: make(map[string]*codeContext), defaults: make(map[string]string)}
}

func (m *Contexts) normLanguage(l string) (string, error) {
	switch strings.ToLower(l) {
	case "", "python", "python3", "py":
		return berthapi.LangPython, nil
	case "javascript", "js", "node":
		return berthapi.LangJavaScript, nil
	case "typescript", "ts":
		return berthapi.LangTypeScript, nil
	case "bash", "sh", "shell":
		return berthapi.LangBash, nil
	case "r", "java":
		// E2B's interpreter has R and Java kernels; berth has none. Say
		// whether the image even has the interpreter.
		bin := map[string]string{"r": "R", "java": "java"}[strings.ToLower(l)]
		if !m.cfg.HasProgram(bin) {
			return "", errdefs.FailedPrecondition("language %q needs %s, which is not installed in the sandbox image (berth's code contexts run python, javascript, typescript and bash)", l, bin)
		}
		return "", errdefs.FailedPrecondition("language %q: the image has %s, but berth has no %s kernel (code contexts run python, javascript, typescript and bash)", l, bin, l)
	}
	return "", errdefs.InvalidArgument("unsupported language %q (python, javascript, typescript or bash)", l)
}

// defaultLanguages get a default context each, listed before their first
// run (as E2B's interpreter lists its default contexts); the interpreter
// starts at the first run.
var defaultLanguages = []string{berthapi.LangPython, berthapi.LangJavaScript, berthapi.LangTypeScript, berthapi.LangBash}

// ensureDefaults registers a default context, not started yet, for each
// default language whose interpreter is on PATH.
func (m *Contexts) ensureDefaults() {
	for _, lang := range defaultLanguages {
		m.mu.Lock()
		_, ok := m.ctxs[m.defaults[lang]]
		m.mu.Unlock()
		if ok {
			continue
		}
		if !m.cfg.HasProgram(kernelArgv(lang)[0]) {
			continue
		}
		_, _ = m.defaultFor(lang)
	}
}

// create makes a new context and starts its interpreter, unless lazy: the
// first run then starts it.
func (m *Contexts) create(req berthapi.CreateCodeContextRequest, lazy bool) (*codeContext, error) {
	lang, err := m.normLanguage(req.Language)
	if err != nil {
		return nil, err
	}
	for k, v := range req.Env {
		if k == "" || len(k)+len(v) > 128<<10 {
			return nil, errdefs.InvalidArgument("invalid environment variable %q", k)
		}
	}
	c := &codeContext{id: newID(), language: lang, env: req.Env, createdAt: time.Now().UTC()}
	user, home, err := m.cfg.User(req.User)
	if err != nil {
		return nil, err
	}
	c.user = user
	c.cwd = home
	if req.Cwd != "" {
		if c.cwd, err = fspath.Resolve(req.Cwd, home); err != nil {
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
	if lazy {
		return c, nil
	}
	k, err := m.startKernel(c)
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

func (m *Contexts) get(id string) (*codeContext, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.ctxs[id]
	if !ok {
		return nil, errdefs.NotFound("code context %q not found", id)
	}
	return c, nil
}

// defaultFor returns the default context of language, creating it.
func (m *Contexts) defaultFor(language string) (*codeContext, error) {
	lang, err := m.normLanguage(language)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if c, ok := m.ctxs[m.defaults[lang]]; ok {
		m.mu.Unlock()
		return c, nil
	}
	m.mu.Unlock()
	c, err := m.create(berthapi.CreateCodeContextRequest{Language: lang}, true)
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

func (m *Contexts) CloseAll() {
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

// HandleCreate serves its route (see New).
func (m *Contexts) HandleCreate(w http.ResponseWriter, r *http.Request) {
	var req berthapi.CreateCodeContextRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	c, err := m.create(req, false)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusCreated, c.info())
}

// HandleList serves its route (see New).
func (m *Contexts) HandleList(w http.ResponseWriter, r *http.Request) {
	m.ensureDefaults()
	m.mu.Lock()
	list := make([]berthapi.CodeContext, 0, len(m.ctxs))
	for _, c := range m.ctxs {
		list = append(list, c.info())
	}
	m.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt.Before(list[j].CreatedAt) })
	httpio.WriteJSON(w, http.StatusOK, berthapi.CodeContextList{Contexts: list})
}

// HandleDelete serves its route (see New).
func (m *Contexts) HandleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m.mu.Lock()
	c, ok := m.ctxs[id]
	delete(m.ctxs, id)
	m.mu.Unlock()
	if !ok {
		httpio.WriteError(w, errdefs.NotFound("code context %q not found", id))
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
// HandleRestart serves its route (see New).
func (m *Contexts) HandleRestart(w http.ResponseWriter, r *http.Request) {
	c, err := m.get(r.PathValue("id"))
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	c.stop()
	c.run.Lock()
	defer c.run.Unlock()
	if err := m.ensureKernel(c, true); err != nil {
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusOK, c.info())
}

// ensureKernel starts an interpreter for c if it has none (or a dead one).
// The caller holds c.run.
func (m *Contexts) ensureKernel(c *codeContext, fresh bool) error {
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
	nk, err := m.startKernel(c)
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
		// Keep imports a cell does not use itself: later cells may.
		TsconfigRaw: `{"compilerOptions":{"verbatimModuleSyntax":true}}`,
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
	ew.rc.SetWriteDeadline(time.Now().Add(httpio.WriteTimeout))
	if _, err := ew.w.Write(append(data, '\n')); err != nil || ew.rc.Flush() != nil {
		ew.dead = true
	}
}

// interrupt asks the running code to stop. bash only acts on SIGINT
// after its foreground command ended, so the bash kernel's whole process
// group gets it, as a terminal's ^C would.
func (k *kernel) interrupt() {
	if k.bash {
		k.signalGroup(syscall.SIGINT)
		return
	}
	k.signal(syscall.SIGINT)
}

// newID returns a random code context id.
func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

package watch

import (
	"encoding/json"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Defaults and bounds for watch requests.
const (
	maxWatchGlobs   = 64
	maxWatchGlobLen = 256
	watchReadBuf    = 64 << 10
)

// DefaultExcludes apply when a request gives no exclude parameter at
// all (an empty "exclude=" turns them off). No watch is added inside an
// excluded directory: node_modules alone can hold more directories than the
// default inotify watch limit.
var DefaultExcludes = []string{".git", "node_modules"}

// Budgets. inotify limits are per user (per user namespace): a sandbox
// whose root is host root shares fs.inotify.max_user_instances (often 128)
// and max_user_watches with the host and with every other such sandbox, so
// one agent must not be able to take them all.
var (
	maxWatchStreams = 16    // concurrent watch streams per agent
	maxWatchedDirs  = 16384 // watched directories per agent, all streams
)

// Config configures a Service.
type Config struct {
	// Path reads and resolves the named path query parameter of a
	// request: relative paths and session scopes are the agent's rules.
	Path func(r *http.Request, name string) (string, error)
	// Heartbeat is how often an idle stream carries a heartbeat line.
	Heartbeat time.Duration
	// Shutdown ends every stream when closed: http.Server.Shutdown does
	// not end streaming handlers.
	Shutdown <-chan struct{}
}

// Service serves the watches of one agent, within one budget.
type Service struct {
	cfg    Config
	budget *watchBudget
}

// New returns a Service. Budgets are read now (SetLimits in tests).
func New(cfg Config) *Service {
	return &Service{cfg: cfg, budget: newWatchBudget()}
}

// watchBudget counts watched directories and streams across the agent.
type watchBudget struct {
	mu         sync.Mutex
	dirs       int
	streams    int
	maxDirs    int
	maxStreams int
}

func newWatchBudget() *watchBudget {
	return &watchBudget{maxDirs: maxWatchedDirs, maxStreams: maxWatchStreams}
}

func (b *watchBudget) openStream() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams >= b.maxStreams {
		return errdefs.ResourceExhausted("too many open watches (limit %d); close some", b.maxStreams)
	}
	b.streams++
	return nil
}

func (b *watchBudget) closeStream() {
	b.mu.Lock()
	b.streams--
	b.mu.Unlock()
}

// reserve takes one directory from the budget.
func (b *watchBudget) reserve() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dirs >= b.maxDirs {
		return false
	}
	b.dirs++
	return true
}

func (b *watchBudget) release(n int) {
	b.mu.Lock()
	b.dirs -= n
	b.mu.Unlock()
}

func nonEmpty(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

func checkGlobs(kind string, globs []string) error {
	if len(globs) > maxWatchGlobs {
		return errdefs.InvalidArgument("at most %d %s globs", maxWatchGlobs, kind)
	}
	for _, g := range globs {
		if len(g) > maxWatchGlobLen {
			return errdefs.InvalidArgument("%s glob longer than %d bytes", kind, maxWatchGlobLen)
		}
		if _, err := path.Match(g, ""); err != nil {
			return errdefs.InvalidArgument("invalid %s glob %q: %w", kind, g, err)
		}
	}
	return nil
}

// parseWatch validates a watch request into watcher options.
func (ws *Service) parseWatch(r *http.Request) (watchOptions, error) {
	var o watchOptions
	root, err := ws.cfg.Path(r, "path")
	if err != nil {
		return o, err
	}
	q := r.URL.Query()
	o.recursive = true
	switch v := q.Get("recursive"); v {
	case "":
	case "1", "true":
	case "0", "false":
		o.recursive = false
	default:
		return o, errdefs.InvalidArgument("recursive must be 0 or 1, not %q", v)
	}
	include := nonEmpty(q["include"])
	exclude := nonEmpty(q["exclude"])
	if len(include) > 0 && len(exclude) > 0 {
		return o, errdefs.InvalidArgument("include and exclude globs are mutually exclusive")
	}
	if _, set := q["exclude"]; !set {
		exclude = DefaultExcludes
	}
	if err := checkGlobs("include", include); err != nil {
		return o, err
	}
	if err := checkGlobs("exclude", exclude); err != nil {
		return o, err
	}
	o.filter = watchFilter{include: include, exclude: exclude}

	fi, err := os.Stat(root)
	if err != nil {
		return o, fspath.Error("watch", root, err)
	}
	if lfi, err := os.Lstat(root); err == nil && lfi.Mode()&os.ModeSymlink != 0 {
		// Watch what the link points to (inside the sandbox), and name
		// events by that path, which is where the files really are.
		if root, err = filepath.EvalSymlinks(root); err != nil {
			return o, fspath.Error("watch", root, err)
		}
	}
	o.root, o.rootIsDir = root, fi.IsDir()
	return o, nil
}

// Handle serves GET /v1/watch.
func (ws *Service) Handle(w http.ResponseWriter, r *http.Request) {
	opts, err := ws.parseWatch(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	if err := ws.budget.openStream(); err != nil {
		httpio.WriteError(w, err)
		return
	}
	defer ws.budget.closeStream()
	opts.budget = ws.budget
	wt, err := newWatcher(opts)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	batches := make(chan []byte)
	quit := make(chan struct{})
	readerDone := make(chan struct{})
	// Stop order matters for the leak guarantee: quit unblocks a pending
	// send, Close unblocks a pending Read, and we wait for the reader.
	defer func() {
		close(quit)
		wt.close()
		<-readerDone
	}()
	go func() {
		defer close(readerDone)
		buf := make([]byte, watchReadBuf)
		for {
			n, err := wt.f.Read(buf)
			if n > 0 {
				select {
				case batches <- append([]byte(nil), buf[:n]...):
				case <-quit:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", wire.WatchContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ok := true
	send := func(ev api.WatchEvent) {
		if !ok {
			return
		}
		if ev.Timestamp.IsZero() {
			ev.Timestamp = time.Now().UTC()
		}
		data, _ := json.Marshal(ev)
		rc.SetWriteDeadline(time.Now().Add(httpio.WriteTimeout))
		if _, err := w.Write(append(data, '\n')); err != nil {
			ok = false
		}
	}
	flush := func() bool {
		if ok && rc.Flush() != nil {
			ok = false
		}
		return ok
	}
	send(api.WatchEvent{Type: api.WatchWatching, Path: opts.root})
	if !flush() {
		return
	}
	every := ws.cfg.Heartbeat
	hb := time.NewTimer(every)
	defer hb.Stop()
	for {
		select {
		case b, open := <-batches:
			if !open {
				send(api.WatchEvent{Type: api.WatchStopped, Reason: "the inotify descriptor failed"})
				flush()
				return
			}
			stop := wt.handle(b, send)
			if stop != "" {
				send(api.WatchEvent{Type: api.WatchStopped, Path: opts.root, Reason: stop})
				flush()
				return
			}
			if !flush() {
				return
			}
			hb.Reset(every)
		case <-hb.C:
			send(api.WatchEvent{Type: api.WatchHeartbeat})
			if !flush() {
				return
			}
			hb.Reset(every)
		case <-ws.cfg.Shutdown:
			send(api.WatchEvent{Type: api.WatchStopped, Reason: "the agent is shutting down"})
			flush()
			return
		case <-r.Context().Done():
			return
		}
	}
}

// watchFilter applies include/exclude globs to paths relative to the watched
// root. A glob without '/' matches any single path component, so
// "node_modules" covers everything below such a directory and "*.go" any Go
// file; a glob with '/' matches the relative path or any of its leading
// parts ("build/out" covers build/out/x).
type watchFilter struct {
	include []string
	exclude []string
}

func globsMatch(globs []string, rel string) bool {
	if rel == "" {
		return false
	}
	for _, g := range globs {
		slash := false
		for i := 0; i < len(g); i++ {
			if g[i] == '/' {
				slash = true
				break
			}
		}
		start := 0
		for i := 0; i <= len(rel); i++ {
			if i < len(rel) && rel[i] != '/' {
				continue
			}
			part := rel[start:i] // one component
			if slash {
				part = rel[:i] // a leading path
			}
			if ok, _ := path.Match(g, part); ok {
				return true
			}
			start = i + 1
		}
	}
	return false
}

// excluded also covers the agent's own staging names (an upload's temp
// file, a restore's staging directory) and everything below them: a watch
// reports what the caller's writes do to their paths, never the agent's
// internal names.
func (f *watchFilter) excluded(rel string) bool {
	return fspath.Internal(rel) || globsMatch(f.exclude, rel)
}

func (f *watchFilter) wanted(rel string) bool {
	return !f.excluded(rel) && (len(f.include) == 0 || globsMatch(f.include, rel))
}

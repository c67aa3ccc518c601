package watch_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agent/watch"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// watchT starts a watch and closes it when the test ends.
func watchT(t *testing.T, c *agentclient.Client, path string, opts agentclient.WatchOptions) *agentclient.Watch {
	t.Helper()
	// The context bounds the whole stream, not just its setup.
	w, err := c.Watch(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// collector reads a watch's events in order.
type collector struct {
	w    *agentclient.Watch
	seen []api.WatchEvent
}

func evString(e api.WatchEvent) string {
	if e.Type != api.WatchEventType {
		return e.Type + ":" + e.Reason
	}
	d := ""
	if e.IsDirectory {
		d = "/"
	}
	return e.EventType + " " + e.Path + d
}

// next returns the next event matching pred, failing at the deadline.
// Non-matching events are kept in seen.
func (c *collector) waitFor(t *testing.T, what string, pred func(api.WatchEvent) bool) api.WatchEvent {
	t.Helper()
	timeout := time.After(pollDeadline)
	for {
		select {
		case e, ok := <-c.w.Events():
			if !ok {
				t.Fatalf("stream ended (%v) before %s; saw %v", c.w.Err(), what, c.strings())
			}
			c.seen = append(c.seen, e)
			if pred(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s; saw %v", what, c.strings())
		}
	}
}

func (c *collector) strings() []string {
	var s []string
	for _, e := range c.seen {
		s = append(s, evString(e))
	}
	return s
}

func (c *collector) want(t *testing.T, kind, path string, isDir bool) api.WatchEvent {
	t.Helper()
	return c.waitFor(t, kind+" "+path, func(e api.WatchEvent) bool {
		return e.Type == api.WatchEventType && e.EventType == kind && e.Path == path && e.IsDirectory == isDir
	})
}

func TestWatchEventTypes(t *testing.T) {
	a, c := newClient(t)
	dir := filepath.Join(a.Dir, "w")
	os.Mkdir(dir, 0o755)
	col := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{Recursive: true})}

	f := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	col.want(t, api.FileCreate, f, false)
	col.want(t, api.FileModify, f, false)
	os.Chmod(f, 0o600)
	col.want(t, api.FileAttrib, f, false)
	g := filepath.Join(dir, "b.txt")
	os.Rename(f, g)
	from := col.want(t, api.FileMoveFrom, f, false)
	to := col.want(t, api.FileMoveTo, g, false)
	if from.Cookie == 0 || from.Cookie != to.Cookie {
		t.Fatalf("move pair cookies %d and %d", from.Cookie, to.Cookie)
	}
	os.Remove(g)
	col.want(t, api.FileDelete, g, false)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	col.want(t, api.FileCreate, sub, true)
	os.Rename(sub, sub+"2")
	col.want(t, api.FileMoveFrom, sub, true)
	col.want(t, api.FileMoveTo, sub+"2", true)
	// The renamed directory is still watched, under its new name.
	os.WriteFile(filepath.Join(sub+"2", "in"), nil, 0o644)
	col.want(t, api.FileCreate, filepath.Join(sub+"2", "in"), false)
	os.Remove(filepath.Join(sub+"2", "in"))
	os.Remove(sub + "2")
	col.want(t, api.FileDelete, sub+"2", true)
	for _, e := range col.seen {
		if e.Timestamp.IsZero() || !filepath.IsAbs(e.Path) {
			t.Fatalf("event %+v lacks a timestamp or an absolute path", e)
		}
	}
}

func TestWatchRecursiveNewSubdirs(t *testing.T) {
	a, c := newClient(t)
	dir := filepath.Join(a.Dir, "r")
	os.MkdirAll(filepath.Join(dir, "old", "deep"), 0o755)
	col := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{Recursive: true})}

	// Pre-existing subdirectories are watched.
	os.WriteFile(filepath.Join(dir, "old", "deep", "f"), nil, 0o644)
	col.want(t, api.FileCreate, filepath.Join(dir, "old", "deep", "f"), false)

	// A tree created in one go: files inside new directories may appear
	// before their watch; the scan reports them.
	leaf := filepath.Join(dir, "n1", "n2", "n3")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(leaf, "x.txt"), []byte("hi"), 0o644)
	col.want(t, api.FileCreate, filepath.Join(dir, "n1"), true)
	col.want(t, api.FileCreate, filepath.Join(dir, "n1", "n2"), true)
	col.want(t, api.FileCreate, leaf, true)
	col.want(t, api.FileCreate, filepath.Join(leaf, "x.txt"), false)
	// And the new leaf is watched from now on.
	os.WriteFile(filepath.Join(leaf, "later"), nil, 0o644)
	col.want(t, api.FileCreate, filepath.Join(leaf, "later"), false)

	// Non-recursive: only the top directory.
	flat := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{})}
	os.WriteFile(filepath.Join(leaf, "deep-change"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "top"), nil, 0o644)
	flat.want(t, api.FileCreate, filepath.Join(dir, "top"), false)
	for _, e := range flat.seen {
		if strings.Contains(e.Path, "deep-change") {
			t.Fatal("a non-recursive watch reported a change two levels down")
		}
	}
}

// TestWatchDefaultExcludes: nothing from node_modules or .git, and no watch
// inside them. The sentinel written last bounds the wait: events come in
// order, so anything from node_modules would arrive before it.
func TestWatchDefaultExcludes(t *testing.T) {
	a, c := newClient(t)
	dir := filepath.Join(a.Dir, "ex")
	nm := filepath.Join(dir, "node_modules", "pkg")
	os.MkdirAll(nm, 0o755)
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	probe := func(opts agentclient.WatchOptions, sentinel string) []string {
		col := &collector{w: watchT(t, c, dir, opts)}
		os.WriteFile(filepath.Join(nm, "index.js"), []byte("x"), 0o644)
		os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("x"), 0o644)
		os.MkdirAll(filepath.Join(dir, "src"), 0o755)
		os.Mkdir(filepath.Join(dir, "src", "node_modules"), 0o755)
		os.WriteFile(filepath.Join(dir, sentinel), nil, 0o644)
		col.want(t, api.FileCreate, filepath.Join(dir, sentinel), false)
		var leaked []string
		for _, e := range col.seen {
			if strings.Contains(e.Path, "node_modules") || strings.Contains(e.Path, ".git") {
				leaked = append(leaked, evString(e))
			}
		}
		col.w.Close()
		return leaked
	}
	if leaked := probe(agentclient.WatchOptions{Recursive: true}, "sentinel1"); len(leaked) > 0 {
		t.Fatalf("default excludes leaked %v", leaked)
	}
	// Negative control: without the defaults the same probe sees them.
	leaked := probe(agentclient.WatchOptions{Recursive: true, NoDefaultExcludes: true}, "sentinel2")
	if !strings.Contains(fmt.Sprint(leaked), filepath.Join(nm, "index.js")) {
		t.Fatalf("without excludes the node_modules write was not seen: %v", leaked)
	}
}

func TestWatchIncludeExclude(t *testing.T) {
	a, c := newClient(t)
	dir := filepath.Join(a.Dir, "ie")
	os.MkdirAll(filepath.Join(dir, "pkg"), 0o755)

	inc := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{Recursive: true, Include: []string{"*.go"}})}
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "pkg", "main.go"), nil, 0o644)
	inc.want(t, api.FileCreate, filepath.Join(dir, "pkg", "main.go"), false)
	for _, e := range inc.seen {
		if !strings.HasSuffix(e.Path, ".go") {
			t.Fatalf("include *.go delivered %s", evString(e))
		}
	}

	exc := &collector{w: watchT(t, c, dir, agentclient.WatchOptions{Recursive: true, Exclude: []string{"*.log", "pkg/gen"}})}
	os.WriteFile(filepath.Join(dir, "debug.log"), nil, 0o644)
	os.MkdirAll(filepath.Join(dir, "pkg", "gen"), 0o755)
	os.WriteFile(filepath.Join(dir, "pkg", "gen", "x.txt"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "keep.txt"), nil, 0o644)
	exc.want(t, api.FileCreate, filepath.Join(dir, "keep.txt"), false)
	for _, e := range exc.seen {
		if strings.HasSuffix(e.Path, ".log") || strings.Contains(e.Path, "/gen") {
			t.Fatalf("exclude delivered %s", evString(e))
		}
	}
}

func TestWatchErrors(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	if _, err := c.Watch(ctx, filepath.Join(a.Dir, "missing"), agentclient.WatchOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing path: %v", err)
	}
	both := agentclient.WatchOptions{Include: []string{"*.go"}, Exclude: []string{"*.log"}}
	if _, err := c.Watch(ctx, a.Dir, both); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("include and exclude: %v", err)
	}
	if _, err := c.Watch(ctx, a.Dir, agentclient.WatchOptions{Include: []string{"[oops"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad glob: %v", err)
	}
	// The status codes themselves, as the host's HTTP layer sees them.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.Socket)
	}}}
	for q, want := range map[string]int{
		"path=" + a.Dir + "/missing":             http.StatusNotFound,
		"path=" + a.Dir + "&include=a&exclude=b": http.StatusBadRequest,
	} {
		resp, err := hc.Get("http://agent/v1/watch?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: HTTP %d, want %d", q, resp.StatusCode, want)
		}
	}
}

func TestWatchSingleFileAndRootRemoval(t *testing.T) {
	a, c := newClient(t)
	f := filepath.Join(a.Dir, "single.txt")
	os.WriteFile(f, nil, 0o644)
	col := &collector{w: watchT(t, c, f, agentclient.WatchOptions{})}
	os.WriteFile(f, []byte("more"), 0o644)
	col.want(t, api.FileModify, f, false)
	os.Remove(f)
	col.want(t, api.FileDelete, f, false)
	col.waitFor(t, "stopped", func(e api.WatchEvent) bool { return e.Type == api.WatchStopped })
	if _, ok := <-col.w.Events(); ok {
		t.Fatal("events after stopped")
	}
	if err := col.w.Err(); err != nil {
		t.Fatalf("a stopped stream ends without error, got %v", err)
	}
}

func TestWatchEstablishedBeforeReturn(t *testing.T) {
	a, c := newClient(t)
	for i := 0; i < 25; i++ {
		dir := filepath.Join(a.Dir, fmt.Sprintf("est%d", i))
		os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
		// Earlier streams are released by the agent asynchronously after
		// Close; wait for a free slot under the stream limit.
		var w *agentclient.Watch
		var err error
		poll(t, "a watch slot", func() bool {
			w, err = c.Watch(context.Background(), dir, agentclient.WatchOptions{Recursive: true})
			if err != nil && !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Fatal(err)
			}
			return err == nil
		})
		col := &collector{w: w}
		f := filepath.Join(dir, "a", "b", "now")
		os.WriteFile(f, nil, 0o644) // right after Watch returned
		col.want(t, api.FileCreate, f, false)
		col.w.Close()
	}
}

// inotifyFds counts this process's inotify descriptors.
func inotifyFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// watchGoroutines counts goroutines running the agent's watch handler.
func watchGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "watch.(*Service).Handle") {
			n++
		}
	}
	return n
}

func TestWatchCloseStopsEverything(t *testing.T) {
	a, c := newClient(t)
	fds0, gs0 := inotifyFds(t), watchGoroutines()
	var ws []*agentclient.Watch
	for i := 0; i < 3; i++ {
		ws = append(ws, watchT(t, c, a.Dir, agentclient.WatchOptions{Recursive: true}))
	}
	// The probes see open watches (so they could catch a leak).
	if got := inotifyFds(t); got != fds0+3 {
		t.Fatalf("inotify fds %d with 3 watches open, want %d", got, fds0+3)
	}
	if got := watchGoroutines(); got < gs0+3 {
		t.Fatalf("watch goroutines %d with 3 watches open, want >= %d", got, gs0+3)
	}
	for _, w := range ws {
		w.Close()
		if _, ok := <-w.Events(); ok {
			t.Fatal("events after Close")
		}
	}
	poll(t, "inotify fds to close", func() bool { return inotifyFds(t) == fds0 })
	poll(t, "watch goroutines to end", func() bool { return watchGoroutines() == gs0 })
}

// TestWatchHeartbeatsKeepIdleStreamAlive: with a short stall timeout, a
// quiet watch survives because of heartbeats; a fake agent that goes silent
// after "watching" is declared dead (the negative control).
func TestWatchHeartbeatsKeepIdleStreamAlive(t *testing.T) {
	a := agenttest.StartWith(t, func(cfg *agent.Config) { cfg.HeartbeatInterval = 20 * time.Millisecond })
	c := agentclient.New(a.Socket)
	defer c.Close()
	c.StallTimeout = time.Second // 50 heartbeats
	w := watchT(t, c, a.Dir, agentclient.WatchOptions{})
	select {
	case e, ok := <-w.Events():
		t.Fatalf("idle watch produced %+v (open %v, err %v)", e, ok, w.Err())
	case <-time.After(1500 * time.Millisecond):
	}

	sock := filepath.Join(a.Dir, "fake.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", wire.WatchContentType)
		fmt.Fprintf(rw, "{\"type\":\"watching\",\"timestamp\":%q}\n", time.Now().Format(time.RFC3339))
		rw.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	defer close(release)
	fc := agentclient.New(sock)
	defer fc.Close()
	fc.StallTimeout = time.Second // 50 heartbeats
	fw, err := fc.Watch(context.Background(), "/", agentclient.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	for range fw.Events() {
	}
	if err := fw.Err(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("silent agent: %v", err)
	}
}

// TestWatchBudget: one agent cannot take more than its share of inotify
// (host root's limits are shared by every sandbox without a user namespace).
func TestWatchBudget(t *testing.T) {
	defer watch.SetLimits(5, 2)()
	a, c := newClient(t)
	small := filepath.Join(a.Dir, "small")
	os.MkdirAll(filepath.Join(small, "a", "b"), 0o755) // 3 directories
	big := filepath.Join(a.Dir, "big")
	for i := 0; i < 6; i++ {
		os.MkdirAll(filepath.Join(big, fmt.Sprint(i)), 0o755)
	}
	ctx := context.Background()
	if _, err := c.Watch(ctx, big, agentclient.WatchOptions{Recursive: true}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("watching 7 directories with a budget of 5: %v", err)
	}
	w1, err := c.Watch(ctx, small, agentclient.WatchOptions{Recursive: true})
	if err != nil {
		t.Fatalf("3 directories within a budget of 5 (the failed attempt must have returned its share): %v", err)
	}
	if _, err := c.Watch(ctx, small, agentclient.WatchOptions{Recursive: true}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("3 more directories: %v", err)
	}
	// Non-recursive: one directory, fits; then the stream limit (2) hits.
	w2, err := c.Watch(ctx, small, agentclient.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Watch(ctx, a.Dir, agentclient.WatchOptions{}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third stream: %v", err)
	}
	w1.Close()
	w2.Close()
	// Closing gives everything back (the agent notices the close shortly).
	var w3 *agentclient.Watch
	poll(t, "the budget to be returned", func() bool {
		w3, err = c.Watch(ctx, small, agentclient.WatchOptions{Recursive: true})
		return err == nil
	})
	defer w3.Close()
	// A directory made inside a watched tree past the budget is reported
	// as an error event, not silently unwatched.
	col := &collector{w: w3} // 3 of 5 directories
	os.MkdirAll(filepath.Join(small, "n1", "n2", "n3"), 0o755)
	col.waitFor(t, "a budget error", func(e api.WatchEvent) bool {
		return e.Type == api.WatchErrorType && e.Error != nil && e.Error.Code == "resource_exhausted"
	})
}

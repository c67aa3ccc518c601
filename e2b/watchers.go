package e2b

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	fspb "github.com/berth-sh/berth/e2b/envdpb/filesystem"
	"github.com/berth-sh/berth/internal/errdefs"
)

// keepaliveInterval is the Keepalive-Ping-Interval the client asked for
// (seconds), default 90 s as envd, at least 1 s.
func keepaliveInterval(req http.Header) time.Duration {
	d := 90 * time.Second
	if v := req.Get("Keepalive-Ping-Interval"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			d = time.Duration(n) * time.Second
		}
	}
	return max(d, time.Second)
}

// Polling watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher), used
// by the Python SDK's synchronous watch_dir.
const (
	maxWatchers        = 64   // per sandbox
	maxBufferedEvents  = 4096 // per watcher; older events are dropped
	watcherIdleTimeout = 10 * time.Minute
)

type watcher struct {
	sandbox string
	cancel  context.CancelFunc
	mu      sync.Mutex
	events  []*fspb.FilesystemEvent
	err     error
	polled  time.Time
}

type watcherTable struct {
	mu sync.Mutex
	ws map[string]*watcher
}

func newWatcherTable() *watcherTable { return &watcherTable{ws: map[string]*watcher{}} }

func (t *watcherTable) forget(sandbox string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, w := range t.ws {
		if w.sandbox == sandbox {
			w.cancel()
			delete(t.ws, id)
		}
	}
}

func (t *watcherTable) get(sandbox, id string) (*watcher, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.ws[id]
	if w == nil || w.sandbox != sandbox {
		return nil, errdefs.NotFound("watcher %q not found", id)
	}
	return w, nil
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	id := sandboxFrom(ctx)
	t := s.h.watchers
	t.mu.Lock()
	n := 0
	for _, w := range t.ws {
		if w.sandbox == id {
			n++
		}
	}
	t.mu.Unlock()
	if n >= maxWatchers {
		return nil, errdefs.ResourceExhausted("at most %d watchers per sandbox", maxWatchers)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ag, release, err := s.h.agent(wctx, id)
	if err != nil {
		cancel()
		return nil, err
	}
	wctx, resolve, err := scope(wctx, req)
	if err != nil {
		release()
		cancel()
		return nil, err
	}
	root := resolve(req.Msg.Path)
	if err := checkWatchDir(wctx, ag, root); err != nil {
		release()
		cancel()
		return nil, err
	}
	wt, err := ag.Watch(wctx, root, agentclient.WatchOptions{Recursive: req.Msg.Recursive, Exclude: []string{}})
	if err != nil {
		release()
		cancel()
		return nil, err
	}
	var b [12]byte
	rand.Read(b[:])
	wid := hex.EncodeToString(b[:])
	w := &watcher{sandbox: id, cancel: cancel, polled: time.Now()}
	t.mu.Lock()
	t.ws[wid] = w
	t.mu.Unlock()
	go func() {
		defer release()
		defer wt.Close()
		idle := time.NewTicker(time.Minute)
		defer idle.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-idle.C:
				w.mu.Lock()
				stale := time.Since(w.polled) > watcherIdleTimeout
				w.mu.Unlock()
				if stale {
					t.mu.Lock()
					delete(t.ws, wid)
					t.mu.Unlock()
					cancel()
				}
			case ev, ok := <-wt.Events():
				w.mu.Lock()
				if !ok {
					w.err = wt.Err()
					if w.err == nil {
						w.err = errdefs.Unavailable("the watch ended")
					}
					w.mu.Unlock()
					return
				}
				if fe, ok := eventOf(root, ev); ok && ev.Type == api.WatchEventType {
					if len(w.events) >= maxBufferedEvents {
						w.events = w.events[1:]
					}
					w.events = append(w.events, fe)
				}
				w.mu.Unlock()
			}
		}
	}()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: wid}), nil
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	w, err := s.h.watchers.get(sandboxFrom(ctx), req.Msg.WatcherId)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polled = time.Now()
	evs := w.events
	w.events = nil
	if len(evs) == 0 && w.err != nil {
		return nil, w.err
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	t := s.h.watchers
	w, err := t.get(sandboxFrom(ctx), req.Msg.WatcherId)
	if err != nil {
		return nil, err
	}
	w.cancel()
	t.mu.Lock()
	delete(t.ws, req.Msg.WatcherId)
	t.mu.Unlock()
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}

// ownerCache maps uids and gids to names from each sandbox's own
// /etc/passwd and /etc/group, read once through the agent (bounded: the
// files belong to the sandbox).
type ownerCache struct {
	mu sync.Mutex
	m  map[string]*owners
}

type owners struct{ users, groups map[uint32]string }

func newOwnerCache() *ownerCache { return &ownerCache{m: map[string]*owners{}} }

func (c *ownerCache) forget(sandbox string) {
	c.mu.Lock()
	delete(c.m, sandbox)
	c.mu.Unlock()
}

func (c *ownerCache) names(ctx context.Context, sandbox string, ag *agentclient.Client, uid, gid uint32) (string, string) {
	c.mu.Lock()
	o := c.m[sandbox]
	c.mu.Unlock()
	if o == nil {
		o = &owners{users: readIDs(ctx, ag, "/etc/passwd"), groups: readIDs(ctx, ag, "/etc/group")}
		if len(o.users) > 0 {
			c.mu.Lock()
			c.m[sandbox] = o
			c.mu.Unlock()
		}
	}
	u, ok := o.users[uid]
	if !ok {
		u = strconv.FormatUint(uint64(uid), 10)
	}
	g, ok := o.groups[gid]
	if !ok {
		g = strconv.FormatUint(uint64(gid), 10)
	}
	return u, g
}

func readIDs(ctx context.Context, ag *agentclient.Client, file string) map[uint32]string {
	out := map[uint32]string{}
	rc, err := ag.ReadFile(ctx, file)
	if err != nil {
		return out
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Split(string(line), ":")
		if len(f) < 3 || len(f[0]) > 64 {
			continue
		}
		if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
			if _, dup := out[uint32(n)]; !dup {
				out[uint32(n)] = f[0]
			}
		}
	}
	return out
}

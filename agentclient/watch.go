package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxWatchLine bounds one NDJSON line from the agent: a path is at most 4096
// bytes, and JSON escaping can grow it sixfold.
const maxWatchLine = 64 << 10

// WatchOptions configures a watch. Include and Exclude are mutually
// exclusive globs (see agent/watch for their meaning); a nil Exclude gets
// the agent's defaults (.git, node_modules), NoDefaultExcludes turns those off.
type WatchOptions struct {
	Recursive         bool
	Include           []string
	Exclude           []string
	NoDefaultExcludes bool
}

// Watch is an established file watch.
type Watch struct {
	events chan api.WatchEvent
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
	closed bool
}

// Watch starts watching path in the sandbox and returns once the agent has
// every inotify watch in place: a change made after Watch returns is
// guaranteed to be reported. Events (type "event", "error" and a final
// "stopped"; heartbeats are consumed here) arrive on Events until the stream
// ends; then Err says why. ctx bounds the whole stream, not just its setup.
// A missing path is a NotFound error.
func (c *Client) Watch(ctx context.Context, path string, opts WatchOptions) (*Watch, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	q := scoped(ctx, url.Values{"path": {path}})
	if opts.Recursive {
		q.Set("recursive", "1")
	} else {
		q.Set("recursive", "0")
	}
	for _, g := range opts.Include {
		if err := validText(g); err != nil {
			return nil, err
		}
		q.Add("include", g)
	}
	for _, g := range opts.Exclude {
		if err := validText(g); err != nil {
			return nil, err
		}
		q.Add("exclude", g)
	}
	if opts.NoDefaultExcludes && len(opts.Exclude) == 0 {
		q.Set("exclude", "")
	}

	ctx, cancel := context.WithCancelCause(ctx)
	stall := c.stallTimeout()
	wd := time.AfterFunc(stall, func() { cancel(errStalled) })
	fail := func(err error) (*Watch, error) {
		wd.Stop()
		cancel(nil)
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint("/v1/watch", q), nil)
	if err != nil {
		return fail(errdefs.InvalidArgument("build watch request: %w", err))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fail(watchError(ctx, stall, err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return fail(errorFromResponse(resp))
	}
	if ct := resp.Header.Get("Content-Type"); ct != wire.WatchContentType {
		resp.Body.Close()
		return fail(errdefs.Unavailable("sandbox agent protocol error: watch answered with content type %q", ct))
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	first, err := readWatchLine(br)
	if err != nil || first.Type != api.WatchWatching {
		resp.Body.Close()
		if err == nil {
			err = errdefs.Unavailable("sandbox agent protocol error: watch stream began with %q", first.Type)
		} else if context.Cause(ctx) != nil {
			err = watchError(ctx, stall, err)
		}
		return fail(err)
	}
	w := &Watch{events: make(chan api.WatchEvent, 64), done: make(chan struct{})}
	w.cancel = func() { cancel(nil) }
	go w.run(ctx, resp.Body, br, wd, stall)
	return w, nil
}

func (w *Watch) run(ctx context.Context, body io.ReadCloser, br *bufio.Reader, wd *time.Timer, stall time.Duration) {
	defer close(w.done)
	defer close(w.events)
	defer body.Close()
	defer wd.Stop()
	for {
		wd.Reset(stall)
		ev, err := readWatchLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) && context.Cause(ctx) == nil {
				err = errdefs.Unavailable("sandbox agent ended the watch stream without a stopped event")
			} else if context.Cause(ctx) != nil {
				err = watchError(ctx, stall, err)
			}
			w.setErr(err)
			return
		}
		if ev.Type == api.WatchHeartbeat {
			continue
		}
		select {
		case w.events <- ev:
		case <-ctx.Done():
			w.setErr(watchError(ctx, stall, ctx.Err()))
			return
		}
		if ev.Type == api.WatchStopped {
			return
		}
	}
}

func (w *Watch) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed && w.err == nil {
		w.err = err
	}
}

// readWatchLine reads one bounded NDJSON line.
func readWatchLine(br *bufio.Reader) (api.WatchEvent, error) {
	var ev api.WatchEvent
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxWatchLine {
			return ev, errdefs.Unavailable("sandbox agent sent a watch event over %d bytes", maxWatchLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		break
	}
	if err := json.Unmarshal(bytes.TrimSpace(line), &ev); err != nil {
		return ev, errdefs.Unavailable("sandbox agent sent an invalid watch event: %w", err)
	}
	return ev, nil
}

// Events delivers events until the stream ends, then is closed.
func (w *Watch) Events() <-chan api.WatchEvent { return w.events }

// Err is why the stream ended: nil after Close or a "stopped" event,
// Unavailable when the agent died or stalled. Valid once Events is closed.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the watch and waits for its goroutine to end.
func (w *Watch) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	<-w.done
	return nil
}

// watchError explains a watch stream that failed.
func watchError(ctx context.Context, stall time.Duration, err error) error {
	if context.Cause(ctx) == errStalled {
		return errdefs.Unavailable("sandbox agent stopped responding: no watch event or heartbeat for %s", stall)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("watch: %w", ctx.Err())
	}
	var kind *errdefs.Error
	if errors.As(err, &kind) {
		return kind
	}
	return errdefs.Unavailable("sandbox agent watch stream failed: %w", err)
}

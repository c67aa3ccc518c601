package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// SSE event names of a watch stream. "warning" carries the agent's
// non-fatal errors (the kernel queue overflowed and events were lost); it
// is not called "error" because on every berth stream "error" is terminal.
const (
	watchEvWatching = "watching"
	watchEvEvent    = "event"
	watchEvWarning  = "warning"
	watchEvStopped  = "stopped"
	watchEvError    = "error"
)

// watch streams file events as server-sent events. Nothing is sent until
// the agent has every inotify watch in place, so a change made after the
// client sees "watching" is always reported; a watch that cannot start
// (missing path) is a plain JSON error. The stream ends with "stopped"
// (the watched path went away) or "error" (the agent died or stalled); when
// the client goes away the agent's watch is closed.
func (s *server) watch(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	opts, err := parseWatchOptions(r)
	if err != nil {
		return err
	}
	ag, release, err := s.agent(r.Context(), name)
	if err != nil {
		return err
	}
	defer release()
	fctx, err := fileCtx(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(fctx)
	defer cancel()
	wt, err := ag.Watch(ctx, p, opts)
	if err != nil {
		return err
	}
	defer wt.Close()

	st := newSSEStream(w, cancel) // a client that went away ends the watch
	if st.event(watchEvWatching, api.WatchEvent{Type: api.WatchWatching, Path: p, Timestamp: time.Now().UTC()}) != nil {
		return nil
	}
	stop := st.keepAlive(s.pingInterval)
	defer stop()
	for ev := range wt.Events() {
		var werr error
		switch ev.Type {
		case api.WatchEventType:
			werr = st.event(watchEvEvent, ev)
		case api.WatchErrorType:
			werr = st.event(watchEvWarning, ev)
		case api.WatchStopped:
			_ = st.finish(watchEvStopped, ev)
			return nil
		}
		if werr != nil {
			return nil // the client is gone; cancel has ended the watch
		}
	}
	if ctx.Err() != nil {
		return nil // the client went away: nobody to tell
	}
	werr := wt.Err()
	var kind *errdefs.Error
	if werr == nil {
		werr = errdefs.Unavailable("the sandbox agent ended the watch stream")
	} else if !errors.As(werr, &kind) {
		// A raw transport error (a truncated chunked body when the
		// agent dies) says the agent is gone, not that berth failed.
		werr = errdefs.Unavailable("sandbox agent watch stream failed: %w", werr)
	}
	e := errorBody(w, werr)
	_ = st.finish(watchEvError, api.WatchEvent{Type: api.WatchErrorType, Error: &e, Timestamp: time.Now().UTC()})
	return nil
}

// parseWatchOptions reads ?recursive= (default true), ?include= and
// ?exclude= (repeatable, mutually exclusive). Without exclude the agent's
// defaults (.git, node_modules) apply; a bare "exclude=" turns them off.
func parseWatchOptions(r *http.Request) (agentclient.WatchOptions, error) {
	q := r.URL.Query()
	opts := agentclient.WatchOptions{Recursive: true}
	if q.Has("recursive") {
		rec, err := queryBool(r, "recursive")
		if err != nil {
			return opts, err
		}
		opts.Recursive = rec
	}
	opts.Include = nonEmptyStrings(q["include"])
	opts.Exclude = nonEmptyStrings(q["exclude"])
	if len(opts.Include) > 0 && len(opts.Exclude) > 0 {
		return opts, errdefs.InvalidArgument("include and exclude globs are mutually exclusive")
	}
	if q.Has("exclude") && len(opts.Exclude) == 0 {
		opts.NoDefaultExcludes = true
	}
	if err := validateGlobs("include", opts.Include); err != nil {
		return opts, err
	}
	return opts, validateGlobs("exclude", opts.Exclude)
}

func nonEmptyStrings(in []string) []string {
	var out []string
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// WatchOptions configures Watch. Include and Exclude are globs matched
// against paths relative to the watched one (and against each path
// component); they are mutually exclusive. Without Exclude, .git and
// node_modules are skipped unless NoDefaultExcludes is set.
type WatchOptions struct {
	Recursive         bool
	Include           []string
	Exclude           []string
	NoDefaultExcludes bool
}

// Watch watches path inside the sandbox and calls fn with each event until
// the watch ends, fn fails or ctx is done:
//
//   - first Type "watching", sent once every inotify watch is in place (a
//     change made after it is always reported);
//   - Type "event": a change (EventType create, modify, delete, move_from,
//     move_to or attrib; Path absolute inside the sandbox);
//   - Type "error": non-fatal, e.g. events were lost to a queue overflow;
//   - Type "stopped": the watched path went away; Watch then returns nil.
//
// A stream the server ends with an error (the sandbox's agent died) is that
// error; one that just stops is errdefs.ErrUnavailable. When fn returns an
// error, the watch is stopped and Watch returns it.
func (c *Client) Watch(ctx context.Context, sandbox, path string, opts WatchOptions, fn func(api.WatchEvent) error) error {
	q := fileQuery(ctx, path, false)
	q.Set("recursive", fmt.Sprint(opts.Recursive))
	for _, g := range opts.Include {
		q.Add("include", g)
	}
	for _, g := range opts.Exclude {
		q.Add("exclude", g)
	}
	if opts.NoDefaultExcludes && len(opts.Exclude) == 0 {
		q.Set("exclude", "")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(sandbox, "watch"), query: q, accept: "text/event-stream"})
	if err != nil {
		return err
	}
	defer func() {
		cancel() // the connection is not reusable mid-stream; drop it
		res.Body.Close()
	}()
	if err := expectEventStream(res); err != nil {
		return err
	}
	var fnErr error
	err = readEvents(res.Body, func(name string, data []byte) (bool, error) {
		switch name {
		case "watching", "event", "warning", "stopped", "error":
		default:
			return false, nil // unknown events are for newer clients
		}
		var ev api.WatchEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, errdefs.Internal("malformed %s event from server: %w", name, err)
		}
		if name == "error" {
			if ev.Error == nil {
				return false, errdefs.Internal("error event without an error")
			}
			return false, ev.Error.Err()
		}
		if err := fn(ev); err != nil {
			fnErr = err
			return false, err
		}
		return name == "stopped", nil
	})
	switch {
	case err == nil:
		return nil
	case fnErr != nil && errors.Is(err, fnErr):
		return fnErr
	case errors.Is(err, errStreamEnded):
		return errdefs.Unavailable("watch of %s in %q: the stream ended without a stopped or error event", path, sandbox)
	case isErrdefs(err):
		return err
	}
	return c.readError(ctx, fmt.Sprintf("watch of %s in %q", path, sandbox), err)
}

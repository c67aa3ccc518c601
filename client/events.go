package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// EventsOptions filter Events.
type EventsOptions struct {
	// Sandbox, when set, is the one sandbox whose events are streamed.
	Sandbox string
	// After resumes after this event id (api.Event.ID); "" starts with
	// the events that happen from now on, "0" with everything the
	// journal still holds.
	After string
}

// Events streams lifecycle events (GET /v1/events) and calls fn with each
// until ctx is done (Events then returns ctx's error), fn fails (its error
// is returned) or the stream ends (errdefs.ErrUnavailable: the daemon
// stopped; resume with After set to the last event's ID). A tenant key
// sees only its own sandboxes' events.
func (c *Client) Events(ctx context.Context, opts EventsOptions, fn func(api.Event) error) error {
	q := url.Values{}
	if opts.Sandbox != "" {
		q.Set("sandbox", opts.Sandbox)
	}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/events", query: q, accept: "text/event-stream"})
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
		if !strings.HasPrefix(name, "sandbox.") {
			return false, nil // unknown events are for newer clients
		}
		var ev api.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, errdefs.Internal("malformed %s event from server: %w", name, err)
		}
		if err := fn(ev); err != nil {
			fnErr = err
			return false, err
		}
		return false, nil
	})
	switch {
	case ctx.Err() != nil && fnErr == nil:
		return ctx.Err()
	case fnErr != nil && errors.Is(err, fnErr):
		return fnErr
	case errors.Is(err, errStreamEnded):
		return errdefs.Unavailable("the event stream ended (the daemon stopped?); resume with After set to the last event's id")
	case isErrdefs(err):
		return err
	}
	return c.readError(ctx, "event stream", err)
}

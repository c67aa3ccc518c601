package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// Events is the lifecycle event feed as the API reads it (package events'
// Feed).
type Events interface {
	// After returns the events after journal seq after, oldest first,
	// and the seq to read after next time.
	After(ctx context.Context, after int64, limit int) ([]api.Event, int64, error)
	// Head is the newest journal seq.
	Head(ctx context.Context) (int64, error)
	// Done is closed when the feed stops (the daemon shuts down): open
	// streams end.
	Done() <-chan struct{}
}

// defaultEventPoll is how often GET /v1/events reads the journal.
const defaultEventPoll = 250 * time.Millisecond

// streamEvents serves GET /v1/events: lifecycle events as server-sent
// events, each with the event's id as its SSE id and its type
// (sandbox.created, ...) as the event name. It resumes after the
// Last-Event-ID header (a reconnecting EventSource sends it) or ?after=;
// with neither it starts at the newest entry (only what happens from
// now); ?after=0 is everything the journal still holds. ?sandbox=NAME
// narrows it to one sandbox. A tenant key sees only the events of its own
// sandboxes (an event whose tenant is unknown is the operator's only).
// Idle streams get a ": ping" comment every few seconds.
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Events == nil {
		return errdefs.FailedPrecondition("this server has no event feed")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	q := r.URL.Query()
	raw, from := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if raw == "" {
		raw, from = q.Get("after"), "after"
	}
	var cur int64
	if raw != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil || n < 0 {
			return errdefs.InvalidArgument("%s %q: want an event id (a journal sequence number)", from, raw)
		}
		cur = n
	} else {
		head, err := s.opts.Events.Head(ctx)
		if err != nil {
			return err
		}
		cur = head
	}
	only := q.Get("sandbox")
	if only != "" {
		if err := api.ValidateSandboxName(only); err != nil {
			return err
		}
	}
	tenant := policy.TenantFrom(ctx)
	poll := s.eventPoll
	if poll <= 0 {
		poll = defaultEventPoll
	}

	st := newSSEStream(w, cancel) // a client that went away ends the loop
	st.comment("events after " + strconv.FormatInt(cur, 10))
	stop := st.keepAlive(s.pingInterval)
	defer stop()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		evs, next, err := s.opts.Events.After(ctx, cur, 500)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.opts.Logf("events after %d: %v", cur, err) // retried at the next tick
		}
		for _, ev := range evs {
			if tenant != "" && ev.Tenant != tenant {
				continue
			}
			if only != "" && ev.Sandbox != only {
				continue
			}
			if st.eventWithID(ev.ID, ev.Type, ev) != nil {
				return nil
			}
		}
		moved := next != cur
		cur = next
		if moved && err == nil {
			continue // more may be waiting: read again at once
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.opts.Events.Done():
			return nil
		case <-t.C:
		}
	}
}

package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Events passes the filter on, hands fn each sandbox.* event (skipping
// pings and unknown event names), stops on fn's error, and reports a
// stream that just ends as unavailable.
func TestEvents(t *testing.T) {
	var query string
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": ping\n\n"+
			"id: 4\nevent: sandbox.created\ndata: {\"id\":\"4\",\"type\":\"sandbox.created\",\"sandbox\":\"a\"}\n\n"+
			"event: something.new\ndata: {}\n\n"+
			"id: 5\nevent: sandbox.started\ndata: {\"id\":\"5\",\"type\":\"sandbox.started\",\"sandbox\":\"a\"}\n\n")
	})
	var got []api.Event
	err := c.Events(context.Background(), EventsOptions{Sandbox: "a", After: "3"}, func(ev api.Event) error {
		got = append(got, ev)
		return nil
	})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("a stream that ends: %v, want unavailable", err)
	}
	if query != "after=3&sandbox=a" || len(got) != 2 || got[0].ID != "4" || got[1].Type != api.EventStarted {
		t.Fatalf("query %q, events %+v", query, got)
	}
	stop := errors.New("enough")
	n := 0
	err = c.Events(context.Background(), EventsOptions{}, func(api.Event) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("fn's error: %v after %d events, want it after 1", err, n)
	}
}

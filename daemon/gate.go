package daemon

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

// staleWatch tells the requests of a cluster member when it turns stale:
// its last heartbeat write is older than the staleness bound (since says
// how long ago it was), so the other members count it as dead and may be
// taking its sandboxes over. Each period of freshness has a context that
// is cancelled (cause errStale) when the member turns stale; the next
// heartbeat that gets through starts a new one.
type staleWatch struct {
	self  string
	since func() time.Duration
	stale time.Duration

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// errStale is the cause of a request context the gate cancelled.
var errStale = errors.New("this member lost the cluster's state store past --node-stale")

func newStaleWatch(self string, since func() time.Duration, stale time.Duration) *staleWatch {
	s := &staleWatch{self: self, since: since, stale: stale}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	return s
}

// staleCheckEvery is how often run checks the heartbeat's age: the
// lateness of an in-flight request's refusal past --node-stale.
func staleCheckEvery(stale time.Duration) time.Duration {
	return min(100*time.Millisecond, max(stale/20, time.Millisecond))
}

// run checks the member every staleCheckEvery until ctx ends.
func (s *staleWatch) run(ctx context.Context) {
	everyTick(ctx, staleCheckEvery(s.stale), func() { s.check() })
}

// check cancels the current context once the member is stale, and starts
// a fresh one once it is not. It returns the age of the last heartbeat
// write and the context of now.
func (s *staleWatch) check() (time.Duration, context.Context) {
	d := s.since()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case d > s.stale && s.ctx.Err() == nil:
		s.cancel(errStale)
	case d <= s.stale && s.ctx.Err() != nil:
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
	}
	return d, s.ctx
}

// refusal is the gate's answer to a request while the member is stale.
func (s *staleWatch) refusal(d time.Duration) error {
	return errdefs.Unavailable(
		"member %q has not reached the cluster's state store for %s (longer than --node-stale %s): the cluster counts it as dead, so it serves nothing until it reaches the store again; retry, or send the request to another member",
		s.self, d.Round(time.Second), s.stale)
}

// storeGate refuses every request but GET /v1/health while this member is
// stale (staleWatch): it answers at once with 503 instead of letting each
// request wait for a state store that does not answer; the first heartbeat
// that gets through opens it again. A request that passed the gate runs
// under a context the gate cancels when the member turns stale, so one
// that was waiting on the store when the member was cut off fails then (at
// about --node-stale after the last heartbeat got through) rather than
// when the connection's own timeout gives up, and nothing this member
// serves outlives its claim on its sandboxes: a long stream (exec output,
// a PTY, a watch, a proxied request) ends too. If the handler had written
// nothing by then, the gate answers the 503.
func storeGate(next http.Handler, s *staleWatch) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			next.ServeHTTP(w, r)
			return
		}
		d, fresh := s.check()
		if d > s.stale {
			server.WriteError(w, s.refusal(d))
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		stop := context.AfterFunc(fresh, func() { cancel(context.Cause(fresh)) })
		defer stop()
		gw := &gateWriter{ResponseWriter: w}
		next.ServeHTTP(gw, r.WithContext(ctx))
		if fresh.Err() != nil && r.Context().Err() == nil && !gw.written() {
			server.WriteError(w, s.refusal(s.since()))
		}
	})
}

// gateWriter records whether the handler wrote anything.
type gateWriter struct {
	http.ResponseWriter
	mu    sync.Mutex
	wrote bool
}

func (w *gateWriter) mark() {
	w.mu.Lock()
	w.wrote = true
	w.mu.Unlock()
}

func (w *gateWriter) written() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wrote
}

func (w *gateWriter) WriteHeader(code int) {
	if code >= 200 { // an informational header is not the answer
		w.mark()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *gateWriter) Write(p []byte) (int, error) {
	w.mark()
	return w.ResponseWriter.Write(p)
}

// Flush and Hijack are methods (not only through Unwrap) because some
// handlers type-assert them.
func (w *gateWriter) Flush() {
	w.mark()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *gateWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.mark()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *gateWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

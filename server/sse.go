package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// streamWriteTimeout bounds each write to a stream's client. A client that
// stops reading would otherwise block the writer forever and, through it,
// the command producing output (adversarial checklist #22: a flood must
// meet backpressure, not unbounded buffering or a stuck goroutine).
const streamWriteTimeout = 30 * time.Second

var errStreamClosed = errors.New("event stream already ended")

func wantsEventStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// sseStream writes server-sent events. It is safe for concurrent use (exec
// stdout and stderr may be written from different goroutines, alongside the
// keep-alive pinger).
//
// The HTTP status is committed lazily, on the first event or ping: if the
// operation fails before producing anything, the caller can still answer
// with a plain JSON error and its proper status (404 for a missing
// sandbox), which is what clients expect from any other route.
type sseStream struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	closed  bool
	buf     bytes.Buffer
	onFail  func() // called once when a write to the client fails
	failed  bool
}

func newSSEStream(w http.ResponseWriter, onFail func()) *sseStream {
	return &sseStream{w: w, rc: http.NewResponseController(w), onFail: onFail}
}

func (s *sseStream) startLocked() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // tell reverse proxies not to buffer
	h.Set("X-Content-Type-Options", "nosniff")
	s.w.WriteHeader(http.StatusOK)
}

// writeLocked sends what is in s.buf and flushes it.
func (s *sseStream) writeLocked() error {
	if s.failed {
		return errStreamClosed
	}
	s.startLocked()
	_ = s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // unsupported in tests' recorders
	_, err := s.w.Write(s.buf.Bytes())
	if err == nil {
		err = s.rc.Flush()
	}
	s.buf.Reset()
	if err != nil {
		s.failed = true
		if s.onFail != nil {
			s.onFail()
		}
	}
	return err
}

func (s *sseStream) appendEventLocked(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	s.buf.Write(data) // JSON from encoding/json never contains a raw newline
	s.buf.WriteString("\n\n")
	return nil
}

// event sends one non-terminal event.
func (s *sseStream) event(name string, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStreamClosed
	}
	if err := s.appendEventLocked(name, v); err != nil {
		return err
	}
	return s.writeLocked()
}

// eventWithID sends one non-terminal event with an SSE id (what a
// reconnecting client sends back as Last-Event-ID).
func (s *sseStream) eventWithID(id, name string, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStreamClosed
	}
	if strings.ContainsAny(id, "\r\n") || strings.ContainsAny(name, "\r\n") {
		return errStreamClosed // never: ids are numbers, names constants
	}
	s.buf.WriteString("id: ")
	s.buf.WriteString(id)
	s.buf.WriteString("\n")
	if err := s.appendEventLocked(name, v); err != nil {
		return err
	}
	return s.writeLocked()
}

// comment sends an SSE comment line (and commits the stream's headers).
func (s *sseStream) comment(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.buf.WriteString(": ")
	s.buf.WriteString(strings.ReplaceAll(strings.ReplaceAll(text, "\r", " "), "\n", " "))
	s.buf.WriteString("\n\n")
	_ = s.writeLocked()
}

// ping sends a comment so idle streams survive proxies and clients can tell
// a slow command from a dead connection.
func (s *sseStream) ping() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.buf.WriteString(": ping\n\n")
	_ = s.writeLocked()
}

// finish sends the terminal event and closes the stream: nothing can be
// written after it, so a stream carries exactly one terminal event.
func (s *sseStream) finish(name string, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStreamClosed
	}
	s.closed = true
	if err := s.appendEventLocked(name, v); err != nil {
		return err
	}
	return s.writeLocked()
}

// closeIfUnstarted closes the stream if nothing was sent yet, and reports
// whether it did; the caller then owns the response and answers with JSON.
func (s *sseStream) closeIfUnstarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return false
	}
	s.closed = true
	return true
}

// keepAlive pings every interval until the returned stop func is called.
// stop waits for the pinger to exit.
func (s *sseStream) keepAlive(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.ping()
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Journal records mutating API calls (arguments, outcome, timestamps) and
// makes calls with an Idempotency-Key replayable. The state store
// implements it.
type Journal interface {
	Begin(ctx context.Context, e store.JournalEntry) (store.JournalEntry, error)
	Finish(ctx context.Context, seq int64, status, result, errMsg string, at time.Time) error
	Journal(ctx context.Context, sandbox string) ([]store.JournalEntry, error)
}

const (
	maxJournaledResult = 4 << 10 // result kept for a call without a key (the journal is a log, not a store)
	maxReplayResult    = 1 << 20 // result kept for replay with a key
	maxIdempotencyKey  = 255
)

// replay is what a keyed call records as its result.
type replay struct {
	Status      int    `json:"status"`
	ContentType string `json:"contentType,omitempty"`
	Body        string `json:"body"`
	Truncated   bool   `json:"truncated,omitempty"`
}

// inflight holds the keys being served by this process: a pending entry
// whose key is not here was left by a daemon that died.
var inflight sync.Map

// journaled runs h for a route that rule honours: the call is recorded,
// and a call with a key seen before gets the first answer (keyRules).
func (s *server) journaled(w http.ResponseWriter, r *http.Request, pattern string, rule keyRule, h handlerFunc) error {
	op := rule.op
	key := r.Header.Get(api.IdempotencyKeyHeader)
	if len(key) > maxIdempotencyKey {
		return errdefs.InvalidArgument("%s is longer than %d bytes", api.IdempotencyKeyHeader, maxIdempotencyKey)
	}
	var body []byte
	if r.Body != nil && r.ContentLength != 0 {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
		if err != nil {
			if mbe, ok := err.(*http.MaxBytesError); ok {
				return errTooLarge{mbe}
			}
			return errdefs.InvalidArgument("read request body: %w", err)
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	stream := journalStream(s, r, pattern, rule, body)
	args := "\"[redacted]\""
	if !rule.redactBody {
		args = redactArgs(r, body)
	} else if len(body) == 0 {
		args = ""
	}
	// The query is part of what a call asks (DELETE …/files?path=…), so
	// it is part of the request a key is compared against.
	detail := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		detail += "?" + r.URL.RawQuery
	}
	e := store.JournalEntry{Sandbox: stream, Op: op, Args: args, Detail: detail}
	if key != "" {
		// Scoped to the route's path and the caller's credential, so one
		// client's key never replays another's call.
		scope := r.Method + " " + r.URL.Path + "\x00" + callerID(r) + "\x00" + key
		sum := sha256.Sum256([]byte(scope))
		e.Key = "http:" + hex.EncodeToString(sum[:16])
		bodySum := sha256.Sum256(body)
		if rule.redactBody {
			// The body is a secret: salt its hash with the key's scope,
			// so the journal holds nothing to look a known value up by.
			bodySum = sha256.Sum256(append([]byte(scope+"\x00"), body...))
		}
		e.Detail += " body-sha256:" + hex.EncodeToString(bodySum[:8])
	}
	ctx := r.Context()
	if e.Key != "" {
		// Claimed before the journal is read, so that a pending entry
		// found below can only be one a dead daemon left.
		if _, busy := inflight.LoadOrStore(e.Key, true); busy {
			return errdefs.FailedPrecondition("a call with this %s is still running; retry later", api.IdempotencyKeyHeader)
		}
		defer inflight.Delete(e.Key)
		done, err := s.beginKeyed(w, r, &e, key)
		if err != nil || done {
			return err
		}
	}
	limit := maxJournaledResult
	if e.Key != "" {
		limit = maxReplayResult
	}
	tw := &teeWriter{ResponseWriter: w, limit: limit}
	herr := h(s, tw, r)
	if herr != nil && !tw.wrote {
		// Render the error here so that its body is what gets recorded.
		if api.HTTPStatus(herr) >= 500 {
			s.opts.Logf("%s %s: %v", r.Method, r.URL.Path, herr)
		}
		writeError(tw, herr)
		herr = nil
	}
	rp := replay{Status: tw.status, ContentType: tw.Header().Get("Content-Type"), Body: tw.buf.String(), Truncated: tw.over}
	if rp.Status == 0 {
		rp.Status = http.StatusOK
	}
	status, errMsg := store.OpDone, ""
	if rp.Status >= 400 {
		status = store.OpFailed
		var eb api.Error
		if json.Unmarshal(tw.buf.Bytes(), &eb) == nil {
			errMsg = eb.Message
		}
	}
	res, _ := json.Marshal(rp)
	fctx := context.WithoutCancel(ctx)
	var err error
	switch {
	case e.Key == "":
		// Without a key nothing needs the entry while the call runs:
		// write it once, finished.
		e.Status, e.Result, e.Error, e.Finished = status, string(res), errMsg, time.Now()
		_, err = s.opts.Journal.Begin(fctx, e)
	case rp.Status >= 500:
		// A server failure is not an answer to replay: leave the entry
		// pending so the retry runs the call again.
		err = s.opts.Journal.Finish(fctx, e.Seq, store.OpPending, "", errMsg, time.Now())
	default:
		err = s.opts.Journal.Finish(fctx, e.Seq, status, string(res), errMsg, time.Now())
	}
	if err != nil {
		s.opts.Logf("journal %s %s: %v", op, stream, err)
	}
	return herr
}

// beginKeyed records the start of a keyed call in e, or, when the key was
// seen before, replays the recorded answer (done=true) or refuses.
func (s *server) beginKeyed(w http.ResponseWriter, r *http.Request, e *store.JournalEntry, key string) (done bool, err error) {
	got, err := s.opts.Journal.Begin(r.Context(), *e)
	if err == nil {
		*e = got
		return false, nil
	}
	if !errdefs.IsKind(err, errdefs.ErrAlreadyExists) {
		return false, err
	}
	if got.Detail != e.Detail {
		return false, errdefs.InvalidArgument("%s %q was used for a different request", api.IdempotencyKeyHeader, key)
	}
	if got.Status == store.OpDone || got.Status == store.OpFailed {
		var rp replay
		if json.Unmarshal([]byte(got.Result), &rp) != nil || rp.Status == 0 {
			return false, errdefs.FailedPrecondition("the first call with this %s left no replayable result", api.IdempotencyKeyHeader)
		}
		if rp.Truncated {
			return false, errdefs.FailedPrecondition("the first call with this %s answered more than %d bytes; it ran, but cannot be replayed", api.IdempotencyKeyHeader, maxReplayResult)
		}
		if rp.ContentType != "" {
			w.Header().Set("Content-Type", rp.ContentType)
		}
		w.Header().Set(api.IdempotentReplayHeader, "true")
		w.WriteHeader(rp.Status)
		_, _ = io.WriteString(w, rp.Body)
		return true, nil
	}
	// Pending, and this process does not run it (the caller holds the
	// key in inflight): a daemon died while running it, so it runs again
	// under the same entry.
	*e = got
	return false, nil
}

// journalStream is the controller a call belongs to.
// Routes that name no sandbox (images, secrets, snapshot and backup
// deletes) record under the empty stream, which no API reads by name.
func journalStream(s *server, r *http.Request, pattern string, rule keyRule, body []byte) string {
	if n := r.PathValue("name"); n != "" {
		return n
	}
	if n := r.PathValue("node"); n != "" {
		// Its own stream: ':' is in no sandbox name, so a node named
		// like a sandbox never writes into that sandbox's journal.
		return "node:" + n
	}
	if strings.HasPrefix(pattern, "POST /v1/objects/") && s.opts.Objects != nil {
		return s.opts.Objects.ObjectJournalName(r.Context(), r.PathValue("class"), r.PathValue("id"))
	}
	if !rule.streamFromBody {
		// An image pull's "name" is an image's, not a sandbox's.
		return ""
	}
	var b struct {
		Name    string `json:"name"`
		Sandbox string `json:"sandbox"`
	}
	_ = json.Unmarshal(body, &b)
	if b.Name != "" {
		return b.Name
	}
	return b.Sandbox
}

// callerID scopes idempotency keys to the credential that made the call.
// A forwarded call carries the fingerprint the entry node took of it (the
// key stayed there): without it every forwarded caller would share one
// scope, and one tenant's key would replay another's answer.
func callerID(r *http.Request) string {
	if id, ok := forward.From(r.Context()); ok {
		if id.Caller != "" {
			return id.Caller
		}
		return "forwarded tenant " + id.Tenant // never one scope for all tenants
	}
	return forward.Fingerprint(r.Header.Get("Authorization"))
}

// secretName matches argument names whose values are secrets.
var secretName = regexp.MustCompile(`(?i)(env|secret|token|password|passwd|key|credential|auth|stdin|content)`)

// redactArgs renders a JSON body for the journal with the values of
// secret-looking fields (and every env value) replaced.
func redactArgs(r *http.Request, body []byte) string {
	if len(body) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		return `"[non-JSON body redacted]"`
	}
	b, _ := json.Marshal(redact(v, false))
	return string(b)
}

func redact(v any, secret bool) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = redact(x, secret || secretName.MatchString(k))
		}
		return t
	case []any:
		if secret {
			return "[redacted]"
		}
		for i, x := range t {
			t[i] = redact(x, false)
		}
		return t
	default:
		if secret && v != nil {
			return "[redacted]"
		}
		return v
	}
}

// teeWriter keeps a bounded copy of what a handler writes.
type teeWriter struct {
	http.ResponseWriter
	buf    bytes.Buffer
	limit  int
	over   bool
	status int
	wrote  bool
}

func (t *teeWriter) WriteHeader(code int) {
	if !t.wrote {
		t.status, t.wrote = code, true
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if !t.wrote {
		t.status, t.wrote = http.StatusOK, true
	}
	if room := t.limit - t.buf.Len(); room > 0 {
		t.buf.Write(p[:min(room, len(p))])
	}
	if t.buf.Len()+len(p) > t.limit {
		t.over = true
	}
	return t.ResponseWriter.Write(p)
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (s *server) getObjectJournal(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Objects == nil {
		return errdefs.NotFound("this berth serves no durable objects")
	}
	return s.writeJournal(w, r, s.opts.Objects.ObjectJournalName(r.Context(), r.PathValue("class"), r.PathValue("id")))
}

func (s *server) getJournal(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	return s.writeJournal(w, r, name)
}

func (s *server) writeJournal(w http.ResponseWriter, r *http.Request, name string) error {
	if s.opts.Journal == nil {
		return errdefs.NotFound("this berth keeps no journal")
	}
	es, err := s.opts.Journal.Journal(r.Context(), name)
	if err != nil {
		return err
	}
	out := make([]api.JournalEntry, 0, len(es))
	for _, e := range es {
		out = append(out, JournalToAPI(e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// JournalToAPI renders a stored entry.
func JournalToAPI(e store.JournalEntry) api.JournalEntry {
	a := api.JournalEntry{Seq: e.Seq, Op: e.Op, Key: e.Key, Detail: e.Detail, Status: e.Status, Error: e.Error, At: e.At.UTC()}
	if e.Args != "" && json.Valid([]byte(e.Args)) {
		a.Args = json.RawMessage(e.Args)
	}
	if e.Result != "" && json.Valid([]byte(e.Result)) {
		a.Result = json.RawMessage(e.Result)
	}
	if !e.Finished.IsZero() {
		f := e.Finished.UTC()
		a.FinishedAt = &f
	}
	return a
}

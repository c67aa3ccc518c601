package server

import (
	"context"
	"net/http"
	"net/url"
	"sync"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *server) health(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.opts.Version, Node: s.opts.NodeName})
	return nil
}

// pathName returns the validated {name} of the URL. The mux has already
// unescaped it, so "%2e%2e%2fetc" arrives here as "../etc" and is refused.
func pathName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	return name, ValidateSandboxName(name)
}

func (s *server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	req, err := parseCreate(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), "", false)
	if err != nil {
		return err
	}
	sb, _, err := s.b.GetOrCreate(r.Context(), req, true)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sandboxes/"+url.PathEscape(sb.Name))
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

func (s *server) getOrCreateSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	req, err := parseCreate(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), name, true)
	if err != nil {
		return err
	}
	sb, created, err := s.b.GetOrCreate(r.Context(), req, false)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, sb)
	return nil
}

func (s *server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := control.ListFilter{State: q.Get("state")}
	if f.State != "" && !validState(f.State) {
		return errdefs.InvalidArgument("query parameter state: want one of starting, running, sleeping, failed, destroyed; got %q", f.State)
	}
	labels, err := parseLabels(q["label"])
	if err != nil {
		return err
	}
	f.Labels = labels
	list, err := s.b.List(r.Context(), f)
	if err != nil {
		return err
	}
	if list == nil {
		list = []api.Sandbox{} // [] on the wire, never null
	}
	writeJSON(w, http.StatusOK, api.SandboxList{Sandboxes: list})
	return nil
}

func (s *server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	sb, err := s.b.Get(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *server) destroySandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	if err := s.b.Destroy(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) sleepSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	if err := s.b.Sleep(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.ExecRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateExec(&req); err != nil {
		return err
	}
	if wantsEventStream(r) {
		return s.execStream(w, r, name, req)
	}
	stdout := &capBuffer{max: s.opts.MaxBufferedOutput}
	stderr := &capBuffer{max: s.opts.MaxBufferedOutput}
	st, err := s.b.Exec(r.Context(), name, req, stdout, stderr)
	if err != nil {
		return err
	}
	res := api.ExecResult{ExitStatus: st}
	res.Stdout, res.Truncated = stdout.result()
	var errTrunc bool
	res.Stderr, errTrunc = stderr.result()
	res.Truncated = res.Truncated || errTrunc
	writeJSON(w, http.StatusOK, res)
	return nil
}

// execStream runs an exec as server-sent events: stdout and stderr events
// as output is produced, then exactly one exit or error event. An error
// after output has started is an error event, never an invented exit code,
// so a client cannot mistake a lost sandbox for a command that failed.
func (s *server) execStream(w http.ResponseWriter, r *http.Request, name string, req api.ExecRequest) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := newSSEStream(w, cancel) // a client that went away cancels the command
	stop := st.keepAlive(s.pingInterval)
	status, err := s.b.Exec(ctx, name, req, &sseOutput{s: st, typ: "stdout"}, &sseOutput{s: st, typ: "stderr"})
	stop()
	if err != nil {
		if st.closeIfUnstarted() {
			return err
		}
		e := errorBody(w, err)
		_ = st.finish("error", api.ExecEvent{Type: "error", Error: &e})
		return nil
	}
	_ = st.finish("exit", api.ExecEvent{Type: "exit", Exit: &status})
	return nil
}

// maxEventData bounds the bytes of output in one event, so that clients can
// bound the line length they accept.
const maxEventData = 32 << 10

type sseOutput struct {
	s   *sseStream
	typ string
}

func (o *sseOutput) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxEventData)]
		if err := o.s.event(o.typ, api.ExecEvent{Type: o.typ, Data: chunk}); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// capBuffer keeps the first max bytes written to it and counts the rest as
// truncated. It never fails a write: failing would kill the command (SIGPIPE)
// instead of just trimming what the buffered API returns.
type capBuffer struct {
	mu        sync.Mutex
	buf       []byte
	max       int64
	truncated bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - int64(len(b.buf))
	if int64(len(p)) > room {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.truncated = true
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *capBuffer) result() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf), b.truncated
}

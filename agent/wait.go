package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxLogLine bounds the partial line a log wait accumulates: a process
// that prints megabytes without a newline must not grow it without bound.
// A longer run is matched as a line of its own.
const maxLogLine = 64 << 10

// slowJSON runs fn and answers with an api.WaitEnvelope. It sends 200 and
// headers at once and then a newline every heartbeat interval while fn
// runs (leading whitespace is valid JSON), so a client can tell an
// operation that takes minutes from an agent that died, and no proxy or
// response-header timeout cuts it off.
func (s *Server) slowJSON(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context) (any, error)) {
	type envelope struct {
		Result any        `json:"result,omitempty"`
		Error  *api.Error `json:"error,omitempty"`
	}
	type answer struct {
		v   any
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := fn(r.Context())
		ch <- answer{v, err}
	}()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	hb := time.NewTicker(s.cfg.HeartbeatInterval)
	defer hb.Stop()
	for {
		select {
		case a := <-ch:
			env := envelope{Result: a.v}
			if a.err != nil {
				e := api.ErrorBody(a.err)
				env = envelope{Error: &e}
			}
			data, _ := json.Marshal(env)
			rc.SetWriteDeadline(time.Now().Add(httpio.WriteTimeout))
			w.Write(data)
			rc.Flush()
			return
		case <-hb.C:
			rc.SetWriteDeadline(time.Now().Add(httpio.WriteTimeout))
			if _, err := w.Write([]byte("\n")); err != nil {
				return // fn sees the cancelled context
			}
			rc.Flush()
		}
	}
}

func checkTimeoutMs(timeoutMs int64) error {
	if timeoutMs < 0 || timeoutMs > child.MaxTimeoutMs {
		return errdefs.InvalidArgument("timeoutMs %d out of range [0, %d]", timeoutMs, int64(child.MaxTimeoutMs))
	}
	return nil
}

// waitContext applies a checked timeoutMs (0: none).
func waitContext(ctx context.Context, timeoutMs int64) (context.Context, context.CancelFunc) {
	if timeoutMs == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
}

// waitEnded turns the end of a wait's context into the error to report:
// a timeout, or the caller having gone away.
func waitEnded(ctx context.Context, format string, args ...any) error {
	if ctx.Err() == context.DeadlineExceeded {
		return errdefs.New(errdefs.ErrDeadlineExceeded, format, args...)
	}
	return errdefs.Unavailable("wait cancelled: %w", ctx.Err())
}

func (p *process) exitedBeforeReady() error {
	return errdefs.FailedPrecondition("process %s %s before it was ready", p.id, p.endedDescription())
}

// decodeWait reads the process and the request body of a wait endpoint.
func (m *procManager) decodeWait(w http.ResponseWriter, r *http.Request, req any) (*process, bool) {
	p, err := m.get(r.PathValue("id"))
	if err == nil {
		err = httpio.DecodeJSON(w, r, httpio.MaxSmallBody, req)
	}
	if err != nil {
		httpio.WriteError(w, err)
		return nil, false
	}
	return p, true
}

func (m *procManager) handleWaitLog(w http.ResponseWriter, r *http.Request) {
	var req api.WaitLogRequest
	p, ok := m.decodeWait(w, r, &req)
	if !ok {
		return
	}
	match, err := logMatcher(req.Pattern, req.Regex)
	if err == nil {
		err = checkTimeoutMs(req.TimeoutMs)
	}
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	m.s.slowJSON(w, r, func(ctx context.Context) (any, error) {
		ctx, cancel := waitContext(ctx, req.TimeoutMs)
		defer cancel()
		return p.waitLog(ctx, req.Pattern, match)
	})
}

// logMatcher returns a function that reports the match groups of a line,
// or nil when it does not match.
func logMatcher(pattern string, isRegex bool) (func(string) []string, error) {
	if pattern == "" {
		return nil, errdefs.InvalidArgument("pattern is empty")
	}
	if !isRegex {
		return func(line string) []string {
			if strings.Contains(line, pattern) {
				return []string{}
			}
			return nil
		}, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, errdefs.InvalidArgument("invalid regular expression %q: %w", pattern, err)
	}
	return re.FindStringSubmatch, nil
}

// waitLog scans p's buffered and then live output, line by line on each
// stream, for the first line that matches.
func (p *process) waitLog(ctx context.Context, pattern string, match func(string) []string) (*api.WaitLogResult, error) {
	var partial [2][]byte
	try := func(t wire.FrameType, line []byte) *api.WaitLogResult {
		s := string(bytes.TrimSuffix(line, []byte("\r")))
		if g := match(s); g != nil {
			res := &api.WaitLogResult{Line: s, Stream: t.String()}
			if len(g) > 0 {
				res.Groups = g
			}
			return res
		}
		return nil
	}
	var after uint64
	for {
		p.mu.Lock()
		chunks := p.ring.since(after)
		ended, changed := p.ended, p.changed
		p.mu.Unlock()
		for _, c := range chunks {
			after = c.seq
			i := 0
			if c.t == wire.Stderr {
				i = 1
			}
			data := c.p
			for len(data) > 0 {
				nl := bytes.IndexByte(data, '\n')
				if nl < 0 {
					partial[i] = append(partial[i], data...)
					if len(partial[i]) >= maxLogLine {
						if res := try(c.t, partial[i]); res != nil {
							return res, nil
						}
						partial[i] = partial[i][:0]
					}
					break
				}
				line := data[:nl]
				if len(partial[i]) > 0 {
					line = append(partial[i], line...)
					partial[i] = partial[i][:0]
				}
				if res := try(c.t, line); res != nil {
					return res, nil
				}
				data = data[nl+1:]
			}
		}
		if ended {
			// The last line may have no newline.
			for i, t := range []wire.FrameType{wire.Stdout, wire.Stderr} {
				if len(partial[i]) > 0 {
					if res := try(t, partial[i]); res != nil {
						return res, nil
					}
				}
			}
			return nil, p.exitedBeforeReady()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, waitEnded(ctx, "process %s: no output line matched %q in time", p.id, pattern)
		}
	}
}

func (m *procManager) handleWaitPort(w http.ResponseWriter, r *http.Request) {
	var req api.WaitPortRequest
	p, ok := m.decodeWait(w, r, &req)
	if !ok {
		return
	}
	err := normalizePortWait(&req)
	if err == nil {
		err = checkTimeoutMs(req.TimeoutMs)
	}
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	m.s.slowJSON(w, r, func(ctx context.Context) (any, error) {
		ctx, cancel := waitContext(ctx, req.TimeoutMs)
		defer cancel()
		return p.waitPort(ctx, &req)
	})
}

func normalizePortWait(req *api.WaitPortRequest) error {
	if req.Port < 1 || req.Port > 65535 {
		return errdefs.InvalidArgument("port %d out of range [1, 65535]", req.Port)
	}
	switch req.Mode {
	case "":
		req.Mode = "http"
	case "http", "tcp":
	default:
		return errdefs.InvalidArgument("mode %q: want http or tcp", req.Mode)
	}
	if req.Path == "" {
		req.Path = "/"
	}
	if req.Path[0] != '/' || strings.ContainsAny(req.Path, " \r\n\t\x00") || len(req.Path) > 2048 {
		return errdefs.InvalidArgument("invalid path %q", req.Path)
	}
	if req.StatusMin == 0 && req.StatusMax == 0 {
		req.StatusMin, req.StatusMax = 200, 399
	} else if req.StatusMax == 0 {
		req.StatusMax = req.StatusMin
	}
	if req.StatusMin < 100 || req.StatusMax > 599 || req.StatusMin > req.StatusMax {
		return errdefs.InvalidArgument("status range [%d, %d] is invalid", req.StatusMin, req.StatusMax)
	}
	switch {
	case req.IntervalMs == 0:
		req.IntervalMs = 500
	case req.IntervalMs < 10:
		req.IntervalMs = 10
	case req.IntervalMs > 10000:
		req.IntervalMs = 10000
	}
	return nil
}

// waitPort probes the port from inside the sandbox until it is ready, the
// process ends (a distinct error, never a timeout) or ctx ends.
func (p *process) waitPort(ctx context.Context, req *api.WaitPortRequest) (*api.WaitPortResult, error) {
	interval := time.Duration(req.IntervalMs) * time.Millisecond
	probeTimeout := max(interval, time.Second)
	// No proxy from the environment (the sandbox's egress proxy must not
	// see loopback probes) and no redirects: a 3xx is an answer.
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	port := strconv.Itoa(req.Port)
	// Servers bind 127.0.0.1, ::1 (Node's "localhost") or both.
	hosts := []string{"127.0.0.1", "::1"}
	probe := func() (int, bool) {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		for _, h := range hosts {
			addr := net.JoinHostPort(h, port)
			if req.Mode == "tcp" {
				var d net.Dialer
				if c, err := d.DialContext(pctx, "tcp", addr); err == nil {
					c.Close()
					return 0, true
				}
				continue
			}
			hr, err := http.NewRequestWithContext(pctx, http.MethodGet, "http://"+addr+req.Path, nil)
			if err != nil {
				return 0, false
			}
			hr.Host = "localhost:" + port
			resp, err := client.Do(hr)
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode >= req.StatusMin && resp.StatusCode <= req.StatusMax {
				return resp.StatusCode, true
			}
		}
		return 0, false
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return nil, p.exitedBeforeReady()
		default:
		}
		if code, ok := probe(); ok {
			return &api.WaitPortResult{StatusCode: code}, nil
		}
		select {
		case <-p.done:
			return nil, p.exitedBeforeReady()
		case <-ctx.Done():
			what := "accept TCP connections"
			if req.Mode == "http" {
				what = fmt.Sprintf("answer GET %s with a status in [%d, %d]", req.Path, req.StatusMin, req.StatusMax)
			}
			return nil, waitEnded(ctx, "process %s: port %d did not %s in time", p.id, req.Port, what)
		case <-tick.C:
		}
	}
}

func (m *procManager) handleWaitExit(w http.ResponseWriter, r *http.Request) {
	var req api.WaitExitRequest
	p, ok := m.decodeWait(w, r, &req)
	if !ok {
		return
	}
	if err := checkTimeoutMs(req.TimeoutMs); err != nil {
		httpio.WriteError(w, err)
		return
	}
	m.s.slowJSON(w, r, func(ctx context.Context) (any, error) {
		ctx, cancel := waitContext(ctx, req.TimeoutMs)
		defer cancel()
		select {
		case <-p.done:
			in := p.info()
			return &in, nil
		case <-ctx.Done():
			return nil, waitEnded(ctx, "process %s did not exit in time", p.id)
		}
	})
}

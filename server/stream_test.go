package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

type sseEvent struct {
	name, data string
}

// readSSE parses a whole event stream, checking the framing strictly.
func readSSE(t *testing.T, body io.Reader) (events []sseEvent, pings int) {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				events = append(events, cur)
			}
			cur = sseEvent{}
		case line == ": ping":
			pings++
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Fatalf("multi-line data; server JSON must be one line")
			}
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	if cur.name != "" || cur.data != "" {
		t.Fatalf("stream ended inside an event: %+v", cur)
	}
	return events, pings
}

func streamExec(t *testing.T, url string, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestExecStream(t *testing.T) {
	f := newFake()
	big := bytes.Repeat([]byte("x"), 100<<10)
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		if name != "box" || req.Argv[0] != "echo" {
			t.Errorf("exec got %q %+v", name, req)
		}
		stdout.Write([]byte("hello\n"))
		stderr.Write([]byte("oops\n"))
		stdout.Write(big)
		return api.ExitStatus{ExitCode: 3, DurationMs: 7}, nil
	}
	ts := newTestServer(t, f, nil)
	res := streamExec(t, ts.URL+"/v1/sandboxes/box/exec", `{"argv":["echo","hi"]}`)
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	events, _ := readSSE(t, res.Body)
	var stdout, stderr bytes.Buffer
	terminals := 0
	for i, ev := range events {
		var e api.ExecEvent
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if e.Type != ev.name {
			t.Fatalf("event name %q but type %q", ev.name, e.Type)
		}
		switch e.Type {
		case "stdout":
			if len(e.Data) > maxEventData {
				t.Fatalf("event carries %d bytes, max %d", len(e.Data), maxEventData)
			}
			stdout.Write(e.Data)
		case "stderr":
			stderr.Write(e.Data)
		case "exit":
			terminals++
			if i != len(events)-1 {
				t.Fatal("exit is not the last event")
			}
			if e.Exit == nil || e.Exit.ExitCode != 3 || e.Exit.DurationMs != 7 {
				t.Fatalf("exit %+v", e.Exit)
			}
		default:
			t.Fatalf("unexpected event %q", e.Type)
		}
	}
	if terminals != 1 {
		t.Fatalf("%d terminal events", terminals)
	}
	if stdout.String() != "hello\n"+string(big) || stderr.String() != "oops\n" {
		t.Fatalf("stdout %d bytes, stderr %q", stdout.Len(), stderr.String())
	}
}

// An error after output has started must end the stream with an error
// event, never an exit event with an invented code.
func TestExecStreamErrorMidStream(t *testing.T) {
	f := newFake()
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		stdout.Write([]byte("partial"))
		return api.ExitStatus{ExitCode: 0}, errdefs.Unavailable("agent connection lost")
	}
	ts := newTestServer(t, f, nil)
	res := streamExec(t, ts.URL+"/v1/sandboxes/box/exec", `{"command":"make"}`)
	defer res.Body.Close()
	events, _ := readSSE(t, res.Body)
	if len(events) != 2 || events[0].name != "stdout" || events[1].name != "error" {
		t.Fatalf("events %+v", events)
	}
	var e api.ExecEvent
	if err := json.Unmarshal([]byte(events[1].data), &e); err != nil || e.Error == nil || e.Exit != nil {
		t.Fatalf("error event %+v %v", e, err)
	}
	if e.Error.Code != "unavailable" || e.Error.Message != "agent connection lost" {
		t.Fatalf("error %+v", e.Error)
	}
}

// Before any output, a failure is an ordinary JSON error with its status.
func TestExecStreamErrorBeforeOutput(t *testing.T) {
	f := newFake()
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		return api.ExitStatus{}, errdefs.NotFound("sandbox %q not found", name)
	}
	ts := newTestServer(t, f, nil)
	res := streamExec(t, ts.URL+"/v1/sandboxes/box/exec", `{"command":"true"}`)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 404 || !strings.Contains(string(b), `"not_found"`) {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
}

// A silent command gets ": ping" comments. The backend only returns once
// the client has seen a ping, so the test does not depend on timing.
func TestExecStreamPing(t *testing.T) {
	f := newFake()
	sawPing := make(chan struct{})
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		select {
		case <-sawPing:
		case <-time.After(10 * time.Second):
			t.Error("client never saw a ping")
		}
		stdout.Write([]byte("done"))
		return api.ExitStatus{}, nil
	}
	ts := newTestServer(t, f, func(s *server) { s.pingInterval = 5 * time.Millisecond })
	res := streamExec(t, ts.URL+"/v1/sandboxes/box/exec", `{"command":"sleep 1"}`)
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != ": ping\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	close(sawPing)
	events, _ := readSSE(t, br)
	if last := events[len(events)-1]; last.name != "exit" {
		t.Fatalf("last event %+v", last)
	}
}

// A client that goes away cancels the command.
func TestExecStreamClientGoneCancels(t *testing.T) {
	f := newFake()
	cancelled := make(chan struct{})
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		for {
			if _, err := stdout.Write([]byte("y\n")); err != nil {
				break
			}
			if ctx.Err() != nil {
				break
			}
		}
		<-ctx.Done()
		close(cancelled)
		return api.ExitStatus{}, ctx.Err()
	}
	ts := newTestServer(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/sandboxes/box/exec", strings.NewReader(`{"command":"yes"}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(res.Body, make([]byte, 1000))
	cancel()
	res.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("backend exec was not cancelled after the client left")
	}
}

func TestExecBuffered(t *testing.T) {
	f := newFake()
	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		if string(req.Stdin) != "in" {
			t.Errorf("stdin %q", req.Stdin)
		}
		stdout.Write([]byte("0123456789"))
		stdout.Write([]byte("abcdef"))
		stderr.Write([]byte("err"))
		return api.ExitStatus{ExitCode: 137, Signal: "SIGKILL"}, nil
	}
	ts := newTestServer(t, f, func(s *server) { s.opts.MaxBufferedOutput = 12 })
	r := do(t, ts, "POST", "/v1/sandboxes/box/exec", strings.NewReader(`{"argv":["x"],"stdin":"aW4="}`))
	var res api.ExecResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if res.Stdout != "0123456789ab" || res.Stderr != "err" || !res.Truncated || res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Fatalf("result %+v", res)
	}

	f.execFn = func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		return api.ExitStatus{}, errdefs.FailedPrecondition("sandbox is being destroyed")
	}
	r = do(t, ts, "POST", "/v1/sandboxes/box/exec", strings.NewReader(`{"argv":["x"]}`))
	if r.status != 409 || r.apiError(t).Code != "failed_precondition" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestImageProgressStream(t *testing.T) {
	f := newFake()
	f.pullFn = func(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error) {
		if progress == nil {
			return api.Image{Ref: req.Ref, Digest: "sha256:aa"}, nil
		}
		progress(api.Progress{Message: "layer 1", Current: 1, Total: 2})
		progress(api.Progress{Message: "rogue", Done: true}) // must not end the stream
		progress(api.Progress{Message: "layer 2", Current: 2, Total: 2})
		if req.Ref == "fail" {
			return api.Image{}, errdefs.Unavailable("registry unreachable")
		}
		return api.Image{Ref: req.Ref, Digest: "sha256:aa"}, nil
	}
	ts := newTestServer(t, f, nil)

	r := do(t, ts, "POST", "/v1/images/pull", strings.NewReader(`{"ref":"alpine"}`))
	var img api.Image
	if r.status != 200 || json.Unmarshal(r.body, &img) != nil || img.Digest != "sha256:aa" {
		t.Fatalf("plain pull: %d %s", r.status, r.body)
	}

	for _, ref := range []string{"alpine", "fail"} {
		r = do(t, ts, "POST", "/v1/images/pull", strings.NewReader(`{"ref":"`+ref+`"}`), "Accept", "text/event-stream")
		events, _ := readSSE(t, bytes.NewReader(r.body))
		if len(events) != 4 {
			t.Fatalf("%s: events %+v", ref, events)
		}
		for _, ev := range events[:3] {
			var p api.Progress
			if ev.name != "progress" || json.Unmarshal([]byte(ev.data), &p) != nil || p.Done || p.Error != nil {
				t.Fatalf("%s: interim event %+v", ref, ev)
			}
		}
		var last api.Progress
		if err := json.Unmarshal([]byte(events[3].data), &last); err != nil {
			t.Fatal(err)
		}
		switch ref {
		case "alpine":
			if events[3].name != "done" || !last.Done || last.Image == nil || last.Image.Digest != "sha256:aa" {
				t.Fatalf("terminal %+v", events[3])
			}
		case "fail":
			if events[3].name != "error" || last.Done || last.Error == nil || last.Error.Code != "unavailable" {
				t.Fatalf("terminal %+v", events[3])
			}
		}
	}
}

func TestRemoveImageRef(t *testing.T) {
	ts := newTestServer(t, newFake(), nil)
	if r := do(t, ts, "DELETE", "/v1/images/docker.io/library/alpine:3.20", nil); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := do(t, ts, "DELETE", "/v1/images/missing", nil); r.status != 404 {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// countingReader yields n bytes of a pattern without holding them.
type countingReader struct {
	left int64
	read atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > c.left {
		n = c.left
	}
	for i := range p[:n] {
		p[i] = byte('a' + (c.read.Load()+int64(i))%26)
	}
	c.left -= n
	c.read.Add(n)
	return int(n), nil
}

var errTimeout = errors.New("timed out")

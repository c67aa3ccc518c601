package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

func wsURL(ts string, path string) string { return "ws" + strings.TrimPrefix(ts, "http") + path }

// dialTerm dials the terminal route. auth "" sends no Authorization.
func (e *devEnv) dialTerm(t *testing.T, ctx context.Context, query string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	c, res, err := websocket.Dial(ctx, wsURL(e.ts.URL, "/v1/sandboxes/dev/terminals/t1/ws"+query), &websocket.DialOptions{HTTPHeader: hdr})
	if c != nil {
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, res, err
}

func bearer() http.Header { return http.Header{"Authorization": {"Bearer " + testKey}} }

// readUntil reads terminal output until it contains want, and returns it.
// It fails on control messages other than ready.
func readUntil(t *testing.T, ctx context.Context, c *websocket.Conn, want string) string {
	t.Helper()
	var out bytes.Buffer
	for !strings.Contains(out.String(), want) {
		typ, p, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading terminal (have %q, want %q): %v", out.String(), want, err)
		}
		if typ == websocket.MessageText {
			var ctl api.TerminalControl
			if json.Unmarshal(p, &ctl) != nil || ctl.Type != api.TerminalReady {
				t.Fatalf("unexpected control message %s", p)
			}
			continue
		}
		out.Write(p)
	}
	return out.String()
}

func expectReady(t *testing.T, ctx context.Context, c *websocket.Conn) {
	t.Helper()
	typ, p, err := c.Read(ctx)
	var ctl api.TerminalControl
	if err != nil || typ != websocket.MessageText || json.Unmarshal(p, &ctl) != nil || ctl.Type != api.TerminalReady {
		t.Fatalf("first message %v %s %v, want ready", typ, p, err)
	}
}

func TestTerminalThroughServer(t *testing.T) {
	e := newDevEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := e.dialTerm(t, ctx, "?create=1&cols=100&rows=30", bearer())
	if err != nil {
		t.Fatal(err)
	}
	expectReady(t, ctx, c)
	if err := c.Write(ctx, websocket.MessageBinary, []byte("echo $((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	// The typed line echoes "$((6*7))"; only the shell's answer is "42".
	readUntil(t, ctx, c, "42")

	// Resize goes through as a control message.
	rs, _ := json.Marshal(api.TerminalControl{Type: api.TerminalResize, Cols: 120, Rows: 40})
	if err := c.Write(ctx, websocket.MessageText, rs); err != nil {
		t.Fatal(err)
	}
	c.Write(ctx, websocket.MessageBinary, []byte("stty size\n"))
	readUntil(t, ctx, c, "40 120")

	// Keystroke round trip: one byte in, its echo out, through the
	// server's relay and the agent's pty.
	var rtts []time.Duration
	for i := 0; i < 50; i++ {
		start := time.Now()
		c.Write(ctx, websocket.MessageBinary, []byte("x"))
		readUntil(t, ctx, c, "x")
		rtts = append(rtts, time.Since(start))
	}
	c.Write(ctx, websocket.MessageBinary, []byte{0x15}) // ^U: drop the x's
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	t.Logf("PTY keystroke->echo round trip through the server: p50 %v, p90 %v, max %v (n=%d)", rtts[len(rtts)/2], rtts[len(rtts)*9/10], rtts[len(rtts)-1], len(rtts))

	c.Close(websocket.StatusNormalClosure, "")

	// A second attach replays the scrollback, answer included.
	c2, _, err := e.dialTerm(t, ctx, "", bearer())
	if err != nil {
		t.Fatal(err)
	}
	expectReady(t, ctx, c2)
	typ, p, err := c2.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || !strings.Contains(string(p), "42") {
		t.Fatalf("scrollback %v %q %v", typ, p, err)
	}
	// exit ends the shell: the exit message carries its code, then the
	// socket closes normally.
	c2.Write(ctx, websocket.MessageBinary, []byte("exit 5\n"))
	for {
		typ, p, err := c2.Read(ctx)
		if err != nil {
			t.Fatalf("no exit message before %v", err)
		}
		var ctl api.TerminalControl
		if typ == websocket.MessageText && json.Unmarshal(p, &ctl) == nil && ctl.Type == api.TerminalExit {
			if ctl.Code == nil || *ctl.Code != 5 {
				t.Fatalf("exit %s", p)
			}
			break
		}
	}
	if _, _, err := c2.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after exit: %v", err)
	}
	e.waitReleased(t)

	var tl api.TerminalList
	e.json(t, "GET", "/terminals", nil, 200, &tl)
	if len(tl.Terminals) != 1 || tl.Terminals[0].Running {
		t.Fatalf("terminals %+v", tl)
	}
	e.json(t, "DELETE", "/terminals/t1", nil, 204, nil)
	e.json(t, "DELETE", "/terminals/t1", nil, 404, nil)
}

func TestTerminalErrorsBeforeUpgrade(t *testing.T) {
	e := newDevEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Attaching to a terminal that does not exist (no create) is a
	// plain 404, decided before the user's socket is accepted.
	_, res, err := e.dialTerm(t, ctx, "", bearer())
	if err == nil || res == nil || res.StatusCode != 404 {
		t.Fatalf("missing terminal: %v %v", res, err)
	}
	// Not an upgrade: 400.
	r := do(t, e.ts, "GET", "/v1/sandboxes/dev/terminals/t1/ws", nil)
	if r.status != 400 {
		t.Fatalf("plain GET: %d %s", r.status, r.body)
	}
	e.waitReleased(t)
}

// TestAccessToken: ?access_token= works only where a browser cannot send a
// header, and a cross-origin page cannot open a terminal.
func TestAccessToken(t *testing.T) {
	e := newDevEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok := "?create=1&access_token=" + testKey

	// Accepted on the WebSocket upgrade, without any header.
	c, _, err := e.dialTerm(t, ctx, tok, nil)
	if err != nil {
		t.Fatalf("access_token on the WebSocket: %v", err)
	}
	expectReady(t, ctx, c)
	c.Close(websocket.StatusNormalClosure, "")

	// A wrong token is refused.
	if _, res, err := e.dialTerm(t, ctx, "?access_token=nope", nil); err == nil || res == nil || res.StatusCode != 401 {
		t.Fatalf("wrong token: %v %v", res, err)
	}
	// The same valid token is refused on every other route (negative
	// control: the token above proves it is the right key).
	for _, p := range []string{
		"/v1/sandboxes/dev/processes" + tok,
		"/v1/sandboxes/dev/terminals" + tok,
		"/v1/sandboxes" + tok,
		"/v1/sandboxes/dev/terminals/t1/ws" + tok, // not an upgrade
	} {
		if r := do(t, e.ts, "GET", p, nil, "Authorization", ""); r.status != 401 {
			t.Errorf("GET %s with access_token: %d, want 401", p, r.status)
		}
	}
	// Accepted on the watch stream (EventSource cannot set headers).
	wctx, wcancel := context.WithCancel(ctx)
	res, sr := e.openStream(t, wctx, "/watch?path="+e.ag.Dir+"&access_token="+testKey, "Authorization", "")
	if res.StatusCode != 200 {
		t.Fatalf("watch with access_token: %d", res.StatusCode)
	}
	if ev, err := sr.next(); err != nil || ev.name != "watching" {
		t.Fatalf("watch: %+v %v", ev, err)
	}
	wcancel()

	// A cross-origin page is refused before anything is attached; the
	// same request from the same origin works (negative control).
	before := e.f.calls.Load()
	_, res, err = e.dialTerm(t, ctx, tok, http.Header{"Origin": {"http://evil.example"}})
	if err == nil || res == nil || res.StatusCode != 403 {
		t.Fatalf("cross-origin: %v %v", res, err)
	}
	if e.f.calls.Load() != before {
		t.Fatal("a cross-origin request reached the backend")
	}
	host := strings.TrimPrefix(e.ts.URL, "http://")
	c, _, err = e.dialTerm(t, ctx, tok, http.Header{"Origin": {"http://" + host}})
	if err != nil {
		t.Fatalf("same origin: %v", err)
	}
	expectReady(t, ctx, c)
	c.Close(websocket.StatusNormalClosure, "")
	e.waitReleased(t)
}

// inotifyFDs counts this process's inotify instances: the in-process agent
// holds one per active watch.
func inotifyFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

func TestWatchStream(t *testing.T) {
	e := newDevEnv(t)
	dir := filepath.Join(e.ag.Dir, "w")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	base := inotifyFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, sr := e.openStream(t, ctx, "/watch?path="+dir+"&recursive=true")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	ev, err := sr.next()
	if err != nil || ev.name != "watching" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	// Created right after the first event: must be reported.
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := sr.next()
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		var we api.WatchEvent
		if ev.name != "event" || json.Unmarshal([]byte(ev.data), &we) != nil {
			t.Fatalf("unexpected %+v", ev)
		}
		if we.EventType == api.FileCreate && we.Path == filepath.Join(dir, "new.txt") && !we.IsDirectory && !we.Timestamp.IsZero() {
			break
		}
	}
	if inotifyFDs(t) <= base {
		t.Fatal("no inotify instance while watching: the probe below could not tell")
	}
	// The client goes away: the agent's watch is closed and the sandbox
	// released.
	cancel()
	eventually(t, "agent watch closed", func() bool { return inotifyFDs(t) == base })
	e.waitReleased(t)

	// A missing path is a plain 404, not a stream.
	r := do(t, e.ts, "GET", "/v1/sandboxes/dev/watch?path="+dir+"/missing", nil, "Accept", "text/event-stream")
	if r.status != 404 {
		t.Fatalf("missing path: %d %s", r.status, r.body)
	}
}

func TestWatchStreamEnds(t *testing.T) {
	e := newDevEnv(t)
	dir := filepath.Join(e.ag.Dir, "gone")
	os.Mkdir(dir, 0o755)
	_, sr := e.openStream(t, context.Background(), "/watch?path="+dir)
	if ev, err := sr.next(); err != nil || ev.name != "watching" {
		t.Fatalf("%+v %v", ev, err)
	}
	// The watched directory goes away: one stopped event ends the stream.
	os.Remove(dir)
	var last sseEvent
	for {
		ev, err := sr.next()
		if err != nil {
			break
		}
		last = ev
	}
	if last.name != "stopped" {
		t.Fatalf("last event %+v, want stopped", last)
	}

	// The agent dies: an error event, not a quiet end.
	dir2 := filepath.Join(e.ag.Dir, "kept")
	os.Mkdir(dir2, 0o755)
	_, sr = e.openStream(t, context.Background(), "/watch?path="+dir2)
	if ev, err := sr.next(); err != nil || ev.name != "watching" {
		t.Fatalf("%+v %v", ev, err)
	}
	e.relay.cut()
	ev, err := sr.next()
	var we api.WatchEvent
	if err != nil || ev.name != "error" || json.Unmarshal([]byte(ev.data), &we) != nil || we.Error == nil || we.Error.Code != "unavailable" {
		t.Fatalf("after agent death: %+v %v", ev, err)
	}
	e.waitReleased(t)
}

// TestAccessTokenStripped: the key never stays in the URL a handler, a log
// line or an upstream request could see, whether or not it was honoured.
func TestAccessTokenStripped(t *testing.T) {
	s := newServer(newFake(), Options{APIKey: testKey})
	for _, c := range []struct {
		pattern string
		upgrade bool
		want    bool
	}{
		{watchPattern, false, true},
		{terminalWSPattern, true, true},
		{terminalWSPattern, false, false},
		{"GET /v1/sandboxes/{name}/processes", true, false},
	} {
		r, _ := http.NewRequest("GET", "http://h/v1/x?path=%2Fa&access_token="+testKey+"&b=1", nil)
		r.RequestURI = r.URL.RequestURI()
		if c.upgrade {
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
		}
		if got := s.tokenAuthorized(r, c.pattern); got != c.want {
			t.Errorf("%s upgrade=%v: %v, want %v", c.pattern, c.upgrade, got, c.want)
		}
		if strings.Contains(r.URL.String(), testKey) || strings.Contains(r.RequestURI, testKey) || r.URL.Query().Get("path") != "/a" {
			t.Errorf("%s: URL after auth %q / %q", c.pattern, r.URL, r.RequestURI)
		}
	}
}

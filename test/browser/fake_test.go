//go:build browser

package browser

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/berth-sh/berth/web"
)

// TestConsoleFakeTerminal runs the same scenario against an in-process
// stand-in for the daemon: the real console handler (web.Mount) in front of
// a fake API whose terminals are /bin/sh on a local pty, speaking the
// terminal WebSocket protocol. It needs only Chromium, so the console's own
// logic (key handling, replay, resize, exit, reconnect) is tested even where
// no daemon runs.
func TestConsoleFakeTerminal(t *testing.T) {
	chromium := needChromium(t)
	const key = "bk_fake_console_key_0123456789abcdef"
	f := &fakeAPI{key: key, terms: map[string]*fakeTerm{}}
	srv := httptest.NewServer(web.Mount(f.handler()))
	defer srv.Close()
	defer f.closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runConsole(t, ctx, chromium, srv.URL, key, "fake", "fake-console")
}

// TestConsoleFakeLogin checks the key prompt: no key shows it, a rejected
// key brings it back with the server's message, a good key opens the list.
func TestConsoleFakeLogin(t *testing.T) {
	chromium := needChromium(t)
	const key = "bk_fake_console_key_0123456789abcdef"
	f := &fakeAPI{key: key, terms: map[string]*fakeTerm{}}
	srv := httptest.NewServer(web.Mount(f.handler()))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctx = startChromium(t, ctx, chromium)
	s := &session{t: t, ctx: ctx, artifacts: t.TempDir(), prefix: "login", events: collectPageEvents(t, ctx, key)}

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/console/")); err != nil {
		t.Fatal(err)
	}
	visible := `(document.getElementById("login").hidden ? "app" : "login") + (document.getElementById("app").hidden ? "" : "+app")`
	s.waitEval("the key prompt", visible, "login")
	submit := func(k string) {
		t.Helper()
		err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.ID("key-input"), k),
			// A click fires the submit event; chromedp.Submit calls
			// form.submit(), which skips it and navigates (and CSP
			// form-action 'none' rightly blocks that).
			chromedp.Click(chromedp.CSS(`#key-form button`)),
		)
		if err != nil {
			t.Fatal(err)
		}
	}
	submit("bk_wrong")
	s.waitEval("the rejection", `document.getElementById("login").hidden ? "" : document.getElementById("key-error").textContent`, "bad key")
	submit(key)
	s.waitEval("the list", `[...document.querySelectorAll(".sandbox .name")].map(e => e.textContent).join(",")`, "fake")
	s.waitEval("the app view", visible, "app+app")
}

type fakeAPI struct {
	key   string
	mu    sync.Mutex
	terms map[string]*fakeTerm
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.key {
			http.Error(w, `{"code":"unauthenticated","message":"bad key"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sandboxes":[{"name":"fake","id":"s1","state":"running","instance":"lite","ip":"10.0.0.2"}]}`))
	})
	mux.HandleFunc("GET /v1/sandboxes/{name}/terminals/{id}/ws", f.attach)
	return mux
}

func (f *fakeAPI) attach(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("access_token") != f.key {
		http.Error(w, "bad key", http.StatusUnauthorized)
		return
	}
	cols, _ := strconv.Atoi(q.Get("cols"))
	rows, _ := strconv.Atoi(q.Get("rows"))
	f.mu.Lock()
	term := f.terms[r.PathValue("id")]
	if term == nil || term.done() {
		var err error
		if term, err = startFakeTerm(cols, rows); err != nil {
			f.mu.Unlock()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.terms[r.PathValue("id")] = term
	}
	f.mu.Unlock()

	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	out, replay := term.subscribe()
	defer term.unsubscribe(out)
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"ready"}`))
	if len(replay) > 0 {
		_ = c.Write(ctx, websocket.MessageBinary, replay)
	}
	go func() {
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				_, _ = term.ptmx.Write(b)
				continue
			}
			var m struct {
				Type       string
				Cols, Rows int
			}
			if json.Unmarshal(b, &m) == nil && m.Type == "resize" && m.Cols > 0 && m.Rows > 0 {
				_ = pty.Setsize(term.ptmx, &pty.Winsize{Cols: uint16(m.Cols), Rows: uint16(m.Rows)})
			}
		}
	}()
	for {
		select {
		case b, ok := <-out:
			if !ok {
				msg, _ := json.Marshal(map[string]any{"type": "exit", "code": term.exitCode})
				_ = c.Write(ctx, websocket.MessageText, msg)
				c.Close(websocket.StatusNormalClosure, "exited")
				return
			}
			if c.Write(ctx, websocket.MessageBinary, b) != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (f *fakeAPI) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.terms {
		if t.cmd.Process != nil {
			_ = t.cmd.Process.Kill()
		}
	}
}

// fakeTerm is a shell on a pty with a scrollback buffer replayed to every
// new subscriber, as the daemon's terminals do.
type fakeTerm struct {
	cmd      *exec.Cmd
	ptmx     *os.File
	mu       sync.Mutex
	buf      []byte
	subs     map[chan []byte]bool
	exited   bool
	exitCode int
}

func startFakeTerm(cols, rows int) (*fakeTerm, error) {
	if cols <= 0 || rows <= 0 {
		cols, rows = 80, 24
	}
	cmd := exec.Command("/bin/sh", "-i")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TERM=xterm-256color", "PS1=$ ", "HOME=/tmp"}
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		return nil, err
	}
	t := &fakeTerm{cmd: cmd, ptmx: ptmx, subs: map[chan []byte]bool{}}
	go t.pump()
	return t, nil
}

func (t *fakeTerm) pump() {
	b := make([]byte, 32<<10)
	for {
		n, err := t.ptmx.Read(b)
		if n > 0 {
			chunk := append([]byte(nil), b[:n]...)
			t.mu.Lock()
			t.buf = append(t.buf, chunk...)
			if len(t.buf) > 256<<10 {
				t.buf = t.buf[len(t.buf)-256<<10:]
			}
			for ch := range t.subs {
				select {
				case ch <- chunk:
				default: // a stalled viewer loses output rather than stalling the shell
				}
			}
			t.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	err := t.cmd.Wait()
	_ = t.ptmx.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exited = true
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.exitCode = ee.ExitCode()
	}
	for ch := range t.subs {
		close(ch)
	}
	t.subs = nil
}

func (t *fakeTerm) done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exited
}

func (t *fakeTerm) subscribe() (chan []byte, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan []byte, 256)
	if t.exited {
		close(ch)
		return ch, append([]byte(nil), t.buf...)
	}
	t.subs[ch] = true
	return ch, append([]byte(nil), t.buf...)
}

func (t *fakeTerm) unsubscribe(ch chan []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subs[ch] {
		delete(t.subs, ch)
	}
}

//go:build browser

package browser

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/berth-sh/berth/web"
)

const (
	command = "echo $((6*7))"
	answer  = "42"
)

// TestConsoleTerminal runs the console against a real daemon and a real
// sandbox.
func TestConsoleTerminal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Chromium runs with --no-sandbox only as root here, and the daemon under test runs sandboxes as root")
	}
	chromium := needChromium(t)
	base, key := strings.TrimRight(os.Getenv("BERTH_URL"), "/"), os.Getenv("BERTH_API_KEY")
	if base == "" || key == "" {
		t.Skip("set BERTH_URL and BERTH_API_KEY to a running berth daemon (see <data>/client.json)")
	}
	consoleBase := consoleOrigin(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	name := "web-" + randHex(4)
	createSandbox(t, ctx, base, key, name)
	runConsole(t, ctx, chromium, consoleBase, key, name, "console")
}

// runConsole is the scenario: open the console on sandbox name, run a
// command in its terminal, reload and see it replayed, check resize, exit
// the shell and reconnect. Screenshots are <prefix>.png and
// <prefix>-reload.png under $BERTH_ARTIFACTS.
func runConsole(t *testing.T, ctx context.Context, chromium, consoleBase, key, name, prefix string) {
	artifacts := envOr("BERTH_ARTIFACTS", "/tmp/berth-artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx = startChromium(t, ctx, chromium)
	s := &session{t: t, ctx: ctx, artifacts: artifacts, prefix: prefix, events: collectPageEvents(t, ctx, key)}

	// The key goes in the fragment: the page stores it in localStorage and
	// strips it from the address, so the reload below proves both.
	frag := url.Values{"key": {key}, "sandbox": {name}, "term": {"t1"}}.Encode()
	if err := chromedp.Do(ctx, chromedp.Navigate(consoleBase+"/console/#"+frag)); err != nil {
		t.Fatalf("open console: %v", err)
	}
	s.waitReady()
	if href := eval[string](s, `location.href`); strings.Contains(href, key) {
		t.Errorf("API key left in the address bar: %s", href)
	}
	if got := eval[string](s, `localStorage.getItem("berth.apiKey") || ""`); got != key {
		t.Errorf("API key not kept in localStorage (got %q)", got)
	}
	// The list shows the sandbox with its state badge.
	badge := fmt.Sprintf(`(() => { for (const b of document.querySelectorAll(".sandbox")) if (b.dataset.name === %q) return b.querySelector(".badge").textContent; return ""; })()`, name)
	s.waitEval("the sandbox in the list as running", badge, "running")

	// A fresh shell prints its prompt: wait for it, so that the negative
	// control below looks at a screen with something on it.
	lines := s.waitScreen("a shell prompt", func(l []string) bool {
		return strings.TrimSpace(strings.Join(l, "")) != ""
	})
	// Negative control: before the command is typed, the detector must not
	// see the answer (else the check below would prove nothing).
	if i := answerLine(lines, answer); i >= 0 {
		t.Fatalf("answer %q on screen before typing (line %d): %q", answer, i, lines)
	}

	s.typeKeys(command + "\r")
	lines = s.waitScreen("the answer below the command", answered)
	t.Logf("screen after typing:\n%s", strings.Join(trimBlank(lines), "\n"))
	s.shot(prefix + ".png")

	// Reload: the page reattaches terminal t1 with the key from
	// localStorage, and the server replays the scrollback.
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	s.waitReady()
	lines = s.waitScreen("the replayed answer after reload", answered)
	t.Logf("screen after reload:\n%s", strings.Join(trimBlank(lines), "\n"))
	s.shot(prefix + "-reload.png")

	// Resize messages reach the pty: the shell's idea of the window size
	// must be xterm's.
	want := eval[string](s, `window.berthTerm.rows + " " + window.berthTerm.cols`)
	s.typeKeys("stty size\r")
	s.waitScreen("stty size = "+want, func(l []string) bool {
		return answerLine(l, want) >= 0
	})

	// Ending the shell shows its exit status and offers a reconnect, which
	// starts a new shell on the same terminal id.
	s.typeKeys("exit 3\r")
	s.waitEval("the exit status", `window.berthConsole.status + " " + document.getElementById("term-status").textContent`, "exited exited (code 3)")
	if hidden := eval[bool](s, `document.getElementById("reconnect").hidden`); hidden {
		t.Error("no reconnect button after exit")
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("reconnect"))); err != nil {
		t.Fatal(err)
	}
	s.waitReady()
	s.typeKeys("echo again$((1+1))\r")
	s.waitScreen("output of a new shell", func(l []string) bool { return answerLine(l, "again2") >= 0 })

	if bad := s.events.failures(); len(bad) > 0 {
		t.Errorf("page errors (exceptions or CSP violations):\n%s", strings.Join(bad, "\n"))
	}
}

func needChromium(t *testing.T) string {
	t.Helper()
	chromium := envOr("BERTH_CHROMIUM", "/usr/bin/chromium")
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	return chromium
}

// answered reports whether the screen shows the command and, below it, a
// line that is exactly the answer.
func answered(lines []string) bool {
	c := lineContaining(lines, command)
	a := answerLine(lines, answer)
	return c >= 0 && a > c
}

// consoleOrigin returns the origin that serves the console: the daemon
// itself, or, with BERTH_WEB_PROXY=1 and a daemon that does not mount the
// console, an in-process front end (web.Mount over a reverse proxy) for
// developing the console against an older daemon.
func consoleOrigin(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/console/")
	if err != nil {
		t.Fatalf("daemon at %s: %v", base, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte("app.js")) {
		return base
	}
	if os.Getenv("BERTH_WEB_PROXY") != "1" {
		t.Fatalf("daemon at %s does not serve the console (GET /console/: %s); mount web.Handler in the daemon, or set BERTH_WEB_PROXY=1 to front it for development", base, resp.Status)
	}
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(web.Mount(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(front.Close)
	t.Logf("console served by an in-process front end at %s for %s", front.URL, base)
	return front.URL
}

func createSandbox(t *testing.T, ctx context.Context, base, key, name string) {
	t.Helper()
	do := func(ctx context.Context, method string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, method, base+"/v1/sandboxes/"+name, strings.NewReader("{}"))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	code, body, err := do(ctx, http.MethodPut)
	if err != nil || code/100 != 2 {
		t.Fatalf("create sandbox %s: %d %s %v", name, code, body, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if code, body, err := do(ctx, http.MethodDelete); err != nil || code/100 != 2 {
			t.Errorf("destroy sandbox %s: %d %s %v", name, code, body, err)
		}
	})
}

// startChromium starts a headless Chromium with a fresh profile and the
// flags that keep it off the network: on this machine's closed network the
// background services would only fail to resolve Google's hosts.
func startChromium(t *testing.T, ctx context.Context, path string) context.Context {
	t.Helper()
	profile, err := os.MkdirTemp("", "berth-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1100, 700),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		bcancel()
		acancel() // waits for the browser process to exit
		// Chromium's helpers can still write to the profile for a moment
		// after it exits; retry instead of leaking the directory.
		for range 50 {
			if err := os.RemoveAll(profile); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("could not remove %s", profile)
	})
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return bctx
}

// session is one browser tab on the console.
type session struct {
	t                 *testing.T
	ctx               context.Context
	artifacts, prefix string
	events            *pageEvents
}

// typeKeys types into the terminal as a user would: key events on the
// focused xterm.js input. Each key is a keyDown carrying its text and a
// keyUp, the pair Chromium turns into keydown, keypress and input as for a
// real keyboard. (chromedp.KeyEvent's separate "char" event makes Chromium
// deliver the character twice to xterm.js, once as keypress and once as
// input.)
func (s *session) typeKeys(keys string) {
	s.t.Helper()
	if _, err := chromedp.Run(s.ctx, chromedp.Evaluate[any](`window.berthTerm.focus()`)); err != nil {
		s.t.Fatal(err)
	}
	err := chromedp.Do(s.ctx, chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
		for _, r := range keys {
			var down, up input.DispatchKeyEventParams
			for _, k := range kb.Encode(r) {
				switch k.Type {
				case kb.KeyDown:
					down = *k
				case kb.KeyChar:
					down.Text, down.UnmodifiedText = k.Text, k.UnmodifiedText
				case kb.KeyUp:
					up = *k
				}
			}
			for _, ev := range []input.DispatchKeyEventParams{down, up} {
				if _, err := cdp.Call(ctx, tgt, input.DispatchKeyEvent, ev); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	if err != nil {
		s.t.Fatalf("type %q: %v", keys, err)
	}
}

// waitEval waits until the string expression expr evaluates to want.
func (s *session) waitEval(what, expr, want string) {
	s.t.Helper()
	var got string
	err := poll(s.ctx, 60*time.Second, func() (bool, error) {
		v, err := chromedp.Run(s.ctx, chromedp.Evaluate[string](expr))
		got = v
		return v == want, err
	})
	if err != nil {
		s.failShot()
		s.t.Fatalf("waiting for %s: got %q, want %q: %v\npage log:\n%s", what, got, want, err, s.events)
	}
}

// pageEvents records what the page logs, to explain failures and to catch
// exceptions and Content-Security-Policy violations.
type pageEvents struct {
	mu       sync.Mutex
	secret   string // redacted from the log: failed WebSocket URLs carry the key
	log, bad []string
}

func collectPageEvents(t *testing.T, ctx context.Context, secret string) *pageEvents {
	t.Helper()
	e := &pageEvents{secret: secret}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			e.add(false, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " ")))
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			e.add(true, "exception: "+msg)
		case *log.EventEntryAdded:
			// CSP violations are "security" entries; a policy that broke
			// xterm.js would show up here.
			e.add(ev.Entry.Source == log.EntrySourceSecurity, fmt.Sprintf("log %s/%s: %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *pageEvents) add(bad bool, msg string) {
	msg = strings.ReplaceAll(msg, e.secret, "<API key>")
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.log) < 200 {
		e.log = append(e.log, msg)
	}
	if bad {
		e.bad = append(e.bad, msg)
	}
}

func (e *pageEvents) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.log) == 0 {
		return "(no page log)"
	}
	return strings.Join(e.log, "\n")
}

func (e *pageEvents) failures() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.bad...)
}

// waitReady waits for the terminal WebSocket to report ready. Starting or
// waking a sandbox can take a while on a loaded machine, hence the long
// deadline; the poll ends as soon as the page is ready.
func (s *session) waitReady() {
	t, ctx := s.t, s.ctx
	t.Helper()
	var status string
	err := poll(ctx, 90*time.Second, func() (bool, error) {
		st, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.berthConsole ? window.berthConsole.status : "no console"`))
		status = st
		return st == "ready", err
	})
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("term-status").textContent`))
		s.failShot()
		t.Fatalf("terminal not ready: %v (status %q, %q)\npage log:\n%s", err, status, text, s.events)
	}
}

func (s *session) waitScreen(what string, ok func([]string) bool) []string {
	t, ctx := s.t, s.ctx
	t.Helper()
	var lines []string
	err := poll(ctx, 60*time.Second, func() (bool, error) {
		l, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.berthConsole.screenLines()`))
		lines = l
		return err == nil && ok(l), err
	})
	if err != nil {
		s.failShot()
		t.Fatalf("waiting for %s: %v\nscreen:\n%s\npage log:\n%s", what, err, strings.Join(trimBlank(lines), "\n"), s.events)
	}
	return lines
}

func poll(ctx context.Context, limit time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		done, err := f()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func eval[T any](s *session, expr string) T {
	s.t.Helper()
	v, err := chromedp.Run(s.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		s.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the tab under the artifacts directory.
func (s *session) shot(name string) {
	t := s.t
	t.Helper()
	path := filepath.Join(s.artifacts, name)
	img, err := chromedp.Run(s.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || cfg.Width < 800 || cfg.Height < 500 {
		t.Fatalf("screenshot is not a full-window PNG (%d bytes, %dx%d): %v", len(img), cfg.Width, cfg.Height, err)
	}
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(img))
}

// failShot keeps a picture of the page for a failure report.
func (s *session) failShot() {
	png, err := chromedp.Run(s.ctx, chromedp.CaptureScreenshot())
	if err == nil {
		path := filepath.Join(s.artifacts, s.prefix+"-failure.png")
		if os.WriteFile(path, png, 0o644) == nil {
			s.t.Logf("failure screenshot: %s", path)
		}
	}
}

func trimBlank(lines []string) []string {
	end := len(lines)
	for end > 0 && strings.TrimSpace(lines[end-1]) == "" {
		end--
	}
	return lines[:end]
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

package preview_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/preview"
)

// gatedStream is an upstream that sends a first chunk, then waits for the
// test to release it before sending the rest. A proxy that buffers would
// hold the first chunk until the end, which never comes on its own.
type gatedStream struct {
	contentType string
	release     chan struct{}
}

func (g *gatedStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", g.contentType)
	fmt.Fprint(w, "data: first\n\n")
	http.NewResponseController(w).Flush()
	select {
	case <-g.release:
	case <-r.Context().Done():
		return
	}
	fmt.Fprint(w, "data: last\n\n")
}

// firstChunkBeforeEnd reports whether the first chunk reached the client,
// within wait, while the upstream was still holding the rest. Since the
// upstream never finishes on its own, a buffering proxy cannot pass however
// long wait is; the pass path waits up to the generous deadline, so slow
// machines do not flake.
func firstChunkBeforeEnd(t *testing.T, hc *http.Client, url string, g *gatedStream, wait time.Duration) bool {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		resp, err := hc.Get(url)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		close(g.release)
		if line != "data: first\n" {
			t.Fatalf("first line %q", line)
		}
		return true
	case <-time.After(wait):
		close(g.release)
		<-got
		return false
	}
}

func TestStreamingIsUnbuffered(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "application/octet-stream"} {
		t.Run(ct, func(t *testing.T) {
			e := newEnv(t, nil)
			g := &gatedStream{contentType: ct, release: make(chan struct{})}
			exp := e.expose("box", 8080, upstream(t, g), false)
			if !firstChunkBeforeEnd(t, e.hc, e.url(exp), g, deadline) {
				t.Fatal("first chunk did not arrive before the upstream finished: the proxy buffers")
			}
		})
	}
}

// Negative control: the same probe catches a proxy that buffers.
func TestStreamingProbeCatchesBuffering(t *testing.T) {
	e := newEnv(t, nil)
	g := &gatedStream{contentType: "text/event-stream", release: make(chan struct{})}
	exp := e.expose("box", 8080, upstream(t, g), false)
	buffering := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := e.hc.Get(e.url(exp))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		io.Copy(&buf, resp.Body)
		w.Write(buf.Bytes())
	}))
	defer buffering.Close()
	// A short wait is safe here: slowness can only make the probe say
	// "buffered", which is what this control expects anyway.
	if firstChunkBeforeEnd(t, http.DefaultClient, buffering.URL, g, time.Second) {
		t.Fatal("probe did not detect a buffering proxy")
	}
}

// wsEcho is an upstream WebSocket echo service.
func wsEcho(t *testing.T) string {
	return upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, p, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, p); err != nil {
				return
			}
		}
	}))
}

func wsURL(u string) string { return "ws" + strings.TrimPrefix(u, "http") }

func (e *env) dialWS(ctx context.Context, url string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, wsURL(url), &websocket.DialOptions{HTTPClient: e.hc, HTTPHeader: hdr})
}

func TestWebSocketEcho(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("ws-box", 8080, wsEcho(t), false)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	// Host form and path form, several at once.
	urls := []string{e.url(exp) + "ws", e.pathURL(exp) + "ws", e.url(exp), e.pathURL(exp)}
	var wg sync.WaitGroup
	errs := make(chan error, len(urls))
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _, err := e.dialWS(ctx, u, nil)
			if err != nil {
				errs <- fmt.Errorf("%s: %v", u, err)
				return
			}
			defer c.CloseNow()
			for j := 0; j < 20; j++ {
				msg := fmt.Sprintf("conn %d msg %d %s", i, j, strings.Repeat("x", j*1000))
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					errs <- err
					return
				}
				_, p, err := c.Read(ctx)
				if err != nil || string(p) != msg {
					errs <- fmt.Errorf("echo %d/%d: %v", i, j, err)
					return
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWebSocketPrivateNeedsKey(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("ws-box", 8080, wsEcho(t), true)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	_, resp, err := e.dialWS(ctx, e.url(exp), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated WebSocket: err=%v resp=%v", err, resp)
	}
	c, _, err := e.dialWS(ctx, e.url(exp), http.Header{"Authorization": {"Bearer " + testKey}})
	if err != nil {
		t.Fatal(err)
	}
	c.CloseNow()
}

// Revoke ends what is already through: open WebSockets and idle pooled
// connections. This is what makes unexpose and token rotation end access
// rather than only refusing new requests.
func TestRevokeEndsOpenConnections(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("box", 8080, wsEcho(t), false)
	other := e.expose("other", 8080, wsEcho(t), false)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	c, _, err := e.dialWS(ctx, e.url(exp), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	keep, _, err := e.dialWS(ctx, e.url(other), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer keep.CloseNow()
	if n := e.p.OpenTunnels("box"); n != 1 {
		t.Fatalf("OpenTunnels = %d, want 1", n)
	}
	e.p.Revoke("box", 8080)
	if _, _, err := c.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("WebSocket survived Revoke: %v", err)
	}
	// The other sandbox's socket is untouched.
	if err := keep.Write(ctx, websocket.MessageText, []byte("still")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := keep.Read(ctx); err != nil || string(p) != "still" {
		t.Fatalf("unrelated WebSocket broken by Revoke: %v", err)
	}
	waitFor(t, func() bool { return e.p.OpenTunnels("box") == 0 })
}

func TestRevokeClosesIdlePooledTunnels(t *testing.T) {
	e := newEnv(t, nil)
	exp := e.expose("box", 8080, echoUpstream(t, "a"), false)
	decodeSeen(t, e.get(e.url(exp)))
	// The upstream connection is now idle in the pool, still a tunnel.
	waitFor(t, func() bool { return e.p.OpenTunnels("box") == 1 })
	e.p.Revoke("box", 0)
	waitFor(t, func() bool { return e.p.OpenTunnels("box") == 0 })
	// New requests still work when the Resolver allows them (a rotated
	// token is refused by the Resolver, not by Revoke).
	decodeSeen(t, e.get(e.url(exp)))
}

func TestTunnelCapPerSandbox(t *testing.T) {
	e := newEnv(t, func(c *preview.Config) { c.MaxTunnelsPerSandbox = 2 })
	exp := e.expose("box", 8080, wsEcho(t), false)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var conns []*websocket.Conn
	for i := 0; i < 2; i++ {
		c, _, err := e.dialWS(ctx, e.url(exp), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		conns = append(conns, c)
	}
	decodeError(t, e.get(e.url(exp)), http.StatusServiceUnavailable, "resource_exhausted")
	conns[0].Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return e.p.OpenTunnels("box") < 2 })
	c, _, err := e.dialWS(ctx, e.url(exp), nil)
	if err != nil {
		t.Fatalf("after a slot was freed: %v", err)
	}
	c.CloseNow()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

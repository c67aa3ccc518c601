package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// proxyHost plays the berth server: it accepts a user's WebSocket on a unix
// socket, attaches to the agent with attach and relays with ProxyTerminal.
// The relay's result goes to the returned channel.
func proxyHost(t *testing.T, attach func(ctx context.Context) (*websocket.Conn, error)) (string, <-chan error) {
	t.Helper()
	sock := filepath.Join(shortDir(t), "host.sock")
	results := make(chan error, 4)
	fakeAgent(t, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		userConn, err := websocket.Accept(w, r, nil)
		if err != nil {
			results <- err
			return
		}
		agentConn, err := attach(context.Background())
		if err != nil {
			userConn.Close(websocket.StatusInternalError, err.Error())
			results <- err
			return
		}
		results <- ProxyTerminal(context.Background(), userConn, agentConn)
	}))
	return sock, results
}

// dialUser connects a "browser" to the proxy host, with a read limit far
// above the proxy's so that anything the proxy relays would arrive.
func dialUser(t *testing.T, sock string) *websocket.Conn {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return naiveDial(ctx, sock)
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://host/term", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadLimit(8 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

// readUntil reads from conn until the accumulated binary output contains
// want (ctl false) or a control message of type want arrives (ctl true).
func readUntil(t *testing.T, conn *websocket.Conn, want string, ctl bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	for {
		typ, p, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v (output %q)", want, err, out.String())
		}
		if typ == websocket.MessageText {
			var m api.TerminalControl
			if err := json.Unmarshal(p, &m); err != nil {
				t.Fatalf("waiting for %q: a control message that is not JSON: %q", want, p)
			}
			if ctl && m.Type == want {
				return
			}
			if m.Type == api.TerminalError {
				t.Fatalf("waiting for %q: the agent reported %q", want, m.Message)
			}
			continue
		}
		out.Write(p)
		if !ctl && strings.Contains(out.String(), want) {
			return
		}
	}
}

// waitTerminal polls the agent's terminal list until ok accepts it.
func waitTerminal(t *testing.T, c *Client, ok func([]api.Terminal) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := c.ListTerminals(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ok(l) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminals: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProxyTerminalBothWays(t *testing.T) {
	a := agenttest.Start(t)
	c := New(a.Socket)
	defer c.Close()
	sock, results := proxyHost(t, func(ctx context.Context) (*websocket.Conn, error) {
		return c.AttachTerminal(ctx, "px", AttachOptions{Create: true, Cols: 80, Rows: 24})
	})
	ctx := context.Background()

	user := dialUser(t, sock)
	readUntil(t, user, api.TerminalReady, true)
	user.Write(ctx, websocket.MessageBinary, []byte("echo $((6*7))\n"))
	readUntil(t, user, "42\r\n", false)
	// Text (control) messages pass through as text.
	ctl, _ := json.Marshal(api.TerminalControl{Type: api.TerminalResize, Cols: 101, Rows: 31})
	if err := user.Write(ctx, websocket.MessageText, ctl); err != nil {
		t.Fatal(err)
	}
	// The agent applies the size before it reads the next message; the
	// listing shows it did, and stty shows the kernel has it.
	waitTerminal(t, c, func(l []api.Terminal) bool { return len(l) == 1 && l[0].Cols == 101 && l[0].Rows == 31 })
	user.Write(ctx, websocket.MessageBinary, []byte("stty size\n"))
	readUntil(t, user, "31 101\r\n", false)

	// The user leaving ends the relay cleanly and detaches from the agent.
	user.Close(websocket.StatusNormalClosure, "bye")
	if err := <-results; err != nil {
		t.Fatalf("relay after the user closed: %v", err)
	}
	waitTerminal(t, c, func(l []api.Terminal) bool { return len(l) == 1 && l[0].Clients == 0 && l[0].Running })

	// The shell exiting: the user gets the exit message, then the agent's
	// normal closure.
	user2 := dialUser(t, sock)
	readUntil(t, user2, api.TerminalReady, true)
	user2.Write(ctx, websocket.MessageBinary, []byte("exit 7\n"))
	readUntil(t, user2, api.TerminalExit, true)
	typ, p, err := user2.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after exit the user read %v %q %v, want a normal closure", typ, p, err)
	}
	if err := <-results; err != nil {
		t.Fatalf("relay after the shell exited: %v", err)
	}
}

// TestProxyTerminalRejectsOversizedAgentMessage: a hostile agent sends a
// 2 MiB message; the relay must not pass it on (the user would accept up to
// 8 MiB) and must end with an error.
func TestProxyTerminalRejectsOversizedAgentMessage(t *testing.T) {
	agentSock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, agentSock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := context.Background()
		conn.Write(ctx, websocket.MessageText, []byte(`{"type":"ready"}`))
		conn.Write(ctx, websocket.MessageBinary, bytes.Repeat([]byte("A"), 2<<20))
		conn.Write(ctx, websocket.MessageBinary, []byte("after"))
		conn.Read(ctx)
	}))
	c := New(agentSock)
	defer c.Close()
	sock, results := proxyHost(t, func(ctx context.Context) (*websocket.Conn, error) {
		return c.AttachTerminal(ctx, "evil", AttachOptions{})
	})
	user := dialUser(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got int
	var err error
	for {
		var p []byte
		if _, p, err = user.Read(ctx); err != nil {
			break
		}
		got += len(p)
	}
	if got > 1<<10 {
		t.Fatalf("the relay passed %d bytes of an oversized message to the user", got)
	}
	if websocket.CloseStatus(err) != websocket.StatusInternalError {
		t.Fatalf("user connection ended with %v, want close status 1011", err)
	}
	if err := <-results; !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "over") {
		t.Fatalf("relay result: %v", err)
	}
}

// TestAttachTerminalBoundsAgentMessages: AttachTerminal's own conn refuses
// an oversized message too.
func TestAttachTerminalBoundsAgentMessages(t *testing.T) {
	agentSock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, agentSock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		conn.Write(context.Background(), websocket.MessageBinary, bytes.Repeat([]byte("A"), MaxTerminalMessage+1))
		conn.Read(context.Background())
	}))
	c := New(agentSock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := c.AttachTerminal(ctx, "x", AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); !errors.Is(err, websocket.ErrMessageTooBig) {
		t.Fatalf("oversized message: %v", err)
	}
}

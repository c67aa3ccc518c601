package terminal

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/api"
)

// The terminal WebSocket protocol: binary messages carry terminal bytes both
// ways; JSON text messages (api.TerminalControl) carry control: "resize"
// from the client, "ready", "exit" and "error" from the agent. On attach a
// client gets "ready", then the scrollback as one binary message, then live
// output; if the shell has already exited, "exit" follows and the agent
// closes the socket.

const (
	// A client may fall behind by clientQueue messages or clientBacklog
	// bytes, whichever comes first. One that falls further behind is
	// disconnected (close status 1008 when possible) rather than allowed
	// to block the shell or the other clients, or to grow the agent's
	// memory; it can reattach and resync from the scrollback.
	clientQueue   = 1024
	clientBacklog = 2 << 20
	// termWriteTimeout bounds one write to a client that stopped reading.
	termWriteTimeout = 30 * time.Second
)

type termMsg struct {
	typ websocket.MessageType
	p   []byte
}

// Why a client's queue was closed.
const (
	closeDetached = iota // the client went away
	closeExit            // the shell exited; close normally after the exit message
	closeSlow            // the client fell behind
)

type termClient struct {
	conn    *websocket.Conn
	backlog int64        // bytes queued and not yet written; under terminal.mu
	out     chan termMsg // closed (under terminal.mu) when the client leaves the set
	reason  int          // set under terminal.mu before out is closed
	// wctx bounds writes; it is cancelled to abort a write stuck on a
	// client that was dropped for falling behind.
	wctx    context.Context
	wcancel context.CancelFunc
	wdone   chan struct{}
}

func controlMsg(c api.TerminalControl) termMsg {
	p, _ := json.Marshal(c)
	return termMsg{typ: websocket.MessageText, p: p}
}

func exitMsg(st api.ExitStatus) termMsg {
	code := st.ExitCode
	return controlMsg(api.TerminalControl{Type: api.TerminalExit, Code: &code, Signal: st.Signal})
}

// broadcastLocked queues m for every client without ever blocking: output
// must not wait for the slowest reader.
func (t *terminal) broadcastLocked(m termMsg) {
	for c := range t.clients {
		t.queueLocked(c, m)
	}
}

// queueLocked queues m for c, or drops c if it is too far behind.
func (t *terminal) queueLocked(c *termClient, m termMsg) {
	if c.backlog+int64(len(m.p)) > clientBacklog {
		t.dropLocked(c, closeSlow)
		return
	}
	select {
	case c.out <- m:
		c.backlog += int64(len(m.p))
	default:
		t.dropLocked(c, closeSlow)
	}
}

// dropLocked removes c from the broadcast set and closes its queue. It is a
// no-op for a client that already left.
func (t *terminal) dropLocked(c *termClient, reason int) {
	if _, ok := t.clients[c]; !ok {
		return
	}
	delete(t.clients, c)
	c.reason = reason
	close(c.out)
	if reason == closeSlow {
		c.wcancel() // abort a write stuck on this client
	}
}

// sendTo queues a control message for one client, if it is still attached.
func (t *terminal) sendTo(c *termClient, m termMsg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.clients[c]; !ok {
		return
	}
	t.queueLocked(c, m)
}

// attach queues the greeting and scrollback for c and adds it to the
// broadcast set in one critical section, so the client sees every byte of
// output exactly once: what came before in the replay, the rest live.
func (t *terminal) attach(c *termClient) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.out <- controlMsg(api.TerminalControl{Type: api.TerminalReady, Cols: t.cols, Rows: t.rows})
	if len(t.sb) > 0 {
		c.out <- termMsg{typ: websocket.MessageBinary, p: append([]byte(nil), t.sb...)}
	}
	if t.exit != nil {
		c.out <- exitMsg(*t.exit)
		c.reason = closeExit
		close(c.out)
		return
	}
	t.clients[c] = struct{}{}
}

func (t *terminal) detach(c *termClient) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(c, closeDetached)
}

// serveClient upgrades the request and runs one client until it or the
// terminal goes away.
func (ts *Terminals) serveClient(w http.ResponseWriter, r *http.Request, t *terminal) {
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept wrote the HTTP error
	}
	conn.SetReadLimit(MaxTerminalMessage)
	// The request context is not tied to a hijacked connection; the
	// client's own context ends its goroutines.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	c := &termClient{conn: conn, out: make(chan termMsg, clientQueue), wctx: wctx, wcancel: wcancel, wdone: make(chan struct{})}
	t.attach(c)
	go t.writeLoop(c)
	for {
		typ, p, err := conn.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageBinary {
			if len(p) > 0 {
				// Blocks while the shell does not read its input;
				// that only holds up this client's keystrokes.
				if _, err := t.master.Write(p); err != nil {
					t.sendTo(c, controlMsg(api.TerminalControl{Type: api.TerminalError, Message: "the terminal is closed"}))
				}
			}
			continue
		}
		var ctl api.TerminalControl
		if err := json.Unmarshal(p, &ctl); err != nil {
			t.sendTo(c, controlMsg(api.TerminalControl{Type: api.TerminalError, Message: "invalid control message: " + err.Error()}))
			continue
		}
		switch ctl.Type {
		case api.TerminalResize:
			if err := t.resize(ctl.Cols, ctl.Rows); err != nil {
				t.sendTo(c, controlMsg(api.TerminalControl{Type: api.TerminalError, Message: err.Error()}))
			}
		default:
			t.sendTo(c, controlMsg(api.TerminalControl{Type: api.TerminalError, Message: "unknown control message type " + ctl.Type}))
		}
	}
	t.detach(c)
	wcancel()
	<-c.wdone
	conn.CloseNow()
}

// writeLoop sends c's queue, then closes the socket the way the queue was
// closed: normally after an exit, with 1008 for a client that fell behind.
func (t *terminal) writeLoop(c *termClient) {
	defer close(c.wdone)
	for m := range c.out {
		ctx, cancel := context.WithTimeout(c.wctx, termWriteTimeout)
		err := c.conn.Write(ctx, m.typ, m.p)
		cancel()
		t.mu.Lock()
		c.backlog -= int64(len(m.p))
		t.mu.Unlock()
		if err != nil {
			t.detach(c)
			for range c.out { // closed by detach (or earlier)
			}
			c.conn.CloseNow()
			return
		}
	}
	t.mu.Lock()
	reason := c.reason
	t.mu.Unlock()
	switch reason {
	case closeExit:
		c.conn.Close(websocket.StatusNormalClosure, "shell exited")
	case closeSlow:
		c.conn.Close(websocket.StatusPolicyViolation, "client too slow; reconnect to resync from the scrollback")
	}
}

package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agent/terminal"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// deadline for every poll in these tests: generous, so a slow machine only
// makes them slower, never flaky.
const pollDeadline = 20 * time.Second

// tconn is a test client on a terminal WebSocket that records everything.
type tconn struct {
	conn *websocket.Conn
	mu   sync.Mutex
	out  bytes.Buffer
	bins [][]byte // binary messages, in order
	ctl  []api.TerminalControl
	err  error
	done chan struct{}
	// changed gets a token after every message, for precise latency
	// measurement without polling.
	changed chan struct{}
}

func attachT(t *testing.T, c *agentclient.Client, id string, opts agentclient.AttachOptions) *tconn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollDeadline)
	defer cancel()
	conn, err := c.AttachTerminal(ctx, id, opts)
	if err != nil {
		t.Fatalf("attach %s: %v", id, err)
	}
	tc := &tconn{conn: conn, done: make(chan struct{}), changed: make(chan struct{}, 1)}
	go func() {
		defer close(tc.done)
		for {
			typ, p, err := conn.Read(context.Background())
			tc.mu.Lock()
			if err != nil {
				tc.err = err
				tc.mu.Unlock()
				return
			}
			if typ == websocket.MessageBinary {
				tc.out.Write(p)
				tc.bins = append(tc.bins, p)
			} else {
				var m api.TerminalControl
				if json.Unmarshal(p, &m) != nil {
					m.Type = "unparseable:" + string(p)
				}
				tc.ctl = append(tc.ctl, m)
			}
			tc.mu.Unlock()
			select {
			case tc.changed <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { conn.CloseNow(); <-tc.done })
	return tc
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(pollDeadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (tc *tconn) output() string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.out.String()
}

func (tc *tconn) waitOut(t *testing.T, sub string) {
	t.Helper()
	end := time.Now().Add(pollDeadline)
	pos := 0 // search only what is new, so polling stays cheap during a flood
	for {
		tc.mu.Lock()
		b := tc.out.Bytes()
		found := bytes.Contains(b[pos:], []byte(sub))
		pos = max(0, len(b)-len(sub)+1)
		tc.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(end) {
			out := tc.output()
			if len(out) > 2000 {
				out = "…" + out[len(out)-2000:]
			}
			tc.mu.Lock()
			err := tc.err
			tc.mu.Unlock()
			t.Fatalf("timed out waiting for output %q; got %q (read error %v)", sub, out, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (tc *tconn) waitCtl(t *testing.T, typ string) api.TerminalControl {
	t.Helper()
	var got api.TerminalControl
	poll(t, typ+" message", func() bool {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		for _, m := range tc.ctl {
			if m.Type == typ {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

func (tc *tconn) send(t *testing.T, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollDeadline)
	defer cancel()
	if err := tc.conn.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
		t.Fatalf("send %q: %v", s, err)
	}
}

func (tc *tconn) control(t *testing.T, m api.TerminalControl) {
	t.Helper()
	p, _ := json.Marshal(m)
	ctx, cancel := context.WithTimeout(context.Background(), pollDeadline)
	defer cancel()
	if err := tc.conn.Write(ctx, websocket.MessageText, p); err != nil {
		t.Fatal(err)
	}
}

func createT(t *testing.T, c *agentclient.Client, req api.CreateTerminalRequest) api.Terminal {
	t.Helper()
	if req.Shell == "" {
		req.Shell = "/bin/sh"
	}
	info, err := c.CreateTerminal(context.Background(), req)
	if err != nil {
		t.Fatalf("create terminal: %v", err)
	}
	return info
}

func listT(t *testing.T, c *agentclient.Client) map[string]api.Terminal {
	t.Helper()
	l, err := c.ListTerminals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]api.Terminal)
	for _, x := range l {
		m[x.ID] = x
	}
	return m
}

func TestTerminalEchoEnvAndCwd(t *testing.T) {
	a, c := newClient(t)
	info := createT(t, c, api.CreateTerminalRequest{ID: "t1", Cwd: a.Dir, Env: map[string]string{"FOO": "bar-baz"}})
	if info.ID != "t1" || !info.Running || info.Pid <= 0 || info.Cols != 80 || info.Rows != 24 {
		t.Fatalf("created %+v", info)
	}
	tc := attachT(t, c, "t1", agentclient.AttachOptions{})
	tc.waitCtl(t, api.TerminalReady)
	tc.send(t, "echo $((6*7))\n")
	tc.waitOut(t, "42\r\n")
	tc.send(t, "echo \"[$FOO|$TERM|$(pwd)]\"\n")
	tc.waitOut(t, "[bar-baz|xterm-256color|"+a.Dir+"]")
}

func TestTerminalResize(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "rs", Cols: 90, Rows: 20})
	tc := attachT(t, c, "rs", agentclient.AttachOptions{})
	if m := tc.waitCtl(t, api.TerminalReady); m.Cols != 90 || m.Rows != 20 {
		t.Fatalf("ready %+v", m)
	}
	tc.send(t, "stty size\n")
	tc.waitOut(t, "20 90\r\n")
	tc.control(t, api.TerminalControl{Type: api.TerminalResize, Cols: 132, Rows: 43})
	poll(t, "resize to show in the listing", func() bool {
		x := listT(t, c)["rs"]
		return x.Cols == 132 && x.Rows == 43
	})
	tc.send(t, "stty size\n")
	tc.waitOut(t, "43 132\r\n")
	// An invalid size is refused with an error message, not applied.
	tc.control(t, api.TerminalControl{Type: api.TerminalResize, Cols: 0, Rows: 5})
	if m := tc.waitCtl(t, api.TerminalError); !strings.Contains(m.Message, "out of range") {
		t.Fatalf("error %+v", m)
	}
}

func TestTerminalBroadcastToAllClients(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "bc"})
	one := attachT(t, c, "bc", agentclient.AttachOptions{})
	two := attachT(t, c, "bc", agentclient.AttachOptions{})
	one.waitCtl(t, api.TerminalReady)
	two.waitCtl(t, api.TerminalReady)
	// The quotes keep the typed command (echoed back) from matching.
	one.send(t, "echo from-'one'\n")
	two.send(t, "echo from-'two'\n")
	for _, tc := range []*tconn{one, two} {
		tc.waitOut(t, "from-one\r\n")
		tc.waitOut(t, "from-two\r\n")
	}
	if n := listT(t, c)["bc"].Clients; n != 2 {
		t.Fatalf("clients = %d, want 2", n)
	}
}

func TestTerminalReconnectReplaysScrollback(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "rp"})
	first := attachT(t, c, "rp", agentclient.AttachOptions{})
	first.send(t, "echo before-'disconnect'\n")
	first.waitOut(t, "before-disconnect\r\n")
	first.conn.Close(websocket.StatusNormalClosure, "")
	poll(t, "client to detach", func() bool { return listT(t, c)["rp"].Clients == 0 })

	second := attachT(t, c, "rp", agentclient.AttachOptions{})
	second.waitCtl(t, api.TerminalReady)
	second.waitOut(t, "before-disconnect\r\n")
	second.send(t, "echo after-'reconnect'\n")
	second.waitOut(t, "after-reconnect\r\n")
	// The replay came as one message right after ready, before live output.
	second.mu.Lock()
	firstBin := string(second.bins[0])
	second.mu.Unlock()
	if !strings.Contains(firstBin, "before-disconnect") || strings.Contains(firstBin, "after-reconnect") {
		t.Fatalf("first binary message is not the scrollback: %q", firstBin)
	}
}

func TestTerminalScrollbackCap(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "cap"})
	tc := attachT(t, c, "cap", agentclient.AttachOptions{})
	tc.send(t, "echo start-'marker'; head -c 1048576 /dev/zero | tr '\\000' a; echo; echo flood-'done'\n")
	tc.waitOut(t, "flood-done\r\n")
	if n := strings.Count(tc.output(), "a"); n < 1<<20 {
		t.Fatalf("attached client got %d bytes of the flood, want all of it", n)
	}
	x := listT(t, c)["cap"]
	if x.ScrollbackBytes > terminal.DefaultScrollback || x.ScrollbackBytes < terminal.DefaultScrollback/2 {
		t.Fatalf("scrollback %d bytes, cap %d", x.ScrollbackBytes, terminal.DefaultScrollback)
	}
	late := attachT(t, c, "cap", agentclient.AttachOptions{})
	late.waitOut(t, "flood-done\r\n")
	late.mu.Lock()
	replay := late.bins[0]
	late.mu.Unlock()
	if len(replay) > terminal.DefaultScrollback {
		t.Fatalf("replay of %d bytes exceeds the cap", len(replay))
	}
	if !bytes.Contains(replay, []byte("flood-done")) || bytes.Contains(replay, []byte("start-marker")) {
		t.Fatalf("replay must keep the newest output and drop the oldest")
	}
}

func TestTerminalExitKeepsScrollbackUntilRecreated(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "ex"})
	tc := attachT(t, c, "ex", agentclient.AttachOptions{})
	tc.send(t, "echo last-'words'; exit 3\n")
	m := tc.waitCtl(t, api.TerminalExit)
	if m.Code == nil || *m.Code != 3 || m.Signal != "" {
		t.Fatalf("exit message %+v", m)
	}
	<-tc.done
	if websocket.CloseStatus(tc.err) != websocket.StatusNormalClosure {
		t.Fatalf("socket closed with %v, want a normal closure", tc.err)
	}
	x := listT(t, c)["ex"]
	if x.Running || x.Exit == nil || x.Exit.ExitCode != 3 {
		t.Fatalf("after exit: %+v", x)
	}
	// A later attach still gets the scrollback, then the exit.
	again := attachT(t, c, "ex", agentclient.AttachOptions{})
	again.waitOut(t, "last-words\r\n")
	again.waitCtl(t, api.TerminalExit)
	// Attach with create replaces the exited terminal with a fresh shell.
	fresh := attachT(t, c, "ex", agentclient.AttachOptions{Create: true, Cols: 70, Rows: 10})
	fresh.waitCtl(t, api.TerminalReady)
	fresh.send(t, "stty size\n")
	fresh.waitOut(t, "10 70\r\n")
	if strings.Contains(fresh.output(), "last-words") {
		t.Fatal("a recreated terminal replayed the old scrollback")
	}
	if x := listT(t, c)["ex"]; !x.Running || x.Pid == 0 {
		t.Fatalf("recreated: %+v", x)
	}
}

func TestTerminalAttachCreatesMissing(t *testing.T) {
	_, c := newClient(t)
	tc := attachT(t, c, "browser", agentclient.AttachOptions{Create: true, Cols: 100, Rows: 30})
	if m := tc.waitCtl(t, api.TerminalReady); m.Cols != 100 || m.Rows != 30 {
		t.Fatalf("ready %+v", m)
	}
	// A second attach with create joins the running terminal.
	two := attachT(t, c, "browser", agentclient.AttachOptions{Create: true})
	two.waitCtl(t, api.TerminalReady)
	tc.send(t, "echo sh'ared'\n")
	two.waitOut(t, "shared\r\n")
	if len(listT(t, c)) != 1 {
		t.Fatal("attach with create made a second terminal")
	}
}

func procGone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i > 0 && i+2 < len(data) && data[i+2] == 'Z'
}

func TestTerminalDeleteKillsShellAndJobs(t *testing.T) {
	_, c := newClient(t)
	info := createT(t, c, api.CreateTerminalRequest{ID: "del"})
	tc := attachT(t, c, "del", agentclient.AttachOptions{})
	tc.send(t, "sleep 1000 & echo bg=$!=\n")
	var mm []string
	poll(t, "the job's pid", func() bool {
		mm = regexp.MustCompile(`bg=(\d+)=`).FindStringSubmatch(tc.output())
		return mm != nil
	})
	bg, _ := strconv.Atoi(mm[1])
	if procGone(bg) || procGone(info.Pid) {
		t.Fatal("shell or job not running before delete")
	}
	if err := c.DeleteTerminal(context.Background(), "del"); err != nil {
		t.Fatal(err)
	}
	m := tc.waitCtl(t, api.TerminalExit)
	if m.Signal != "SIGKILL" {
		t.Fatalf("exit after delete: %+v", m)
	}
	if !procGone(info.Pid) {
		t.Fatal("shell still running after delete")
	}
	poll(t, "background job to die", func() bool { return procGone(bg) })
	if _, ok := listT(t, c)["del"]; ok {
		t.Fatal("deleted terminal still listed")
	}
	if err := c.DeleteTerminal(context.Background(), "del"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestTerminalErrors(t *testing.T) {
	a, c := newClient(t)
	ctx := context.Background()
	if _, err := c.AttachTerminal(ctx, "nope", agentclient.AttachOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("attach missing: %v", err)
	}
	createT(t, c, api.CreateTerminalRequest{ID: "dup"})
	if _, err := c.CreateTerminal(ctx, api.CreateTerminalRequest{ID: "dup"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate: %v", err)
	}
	for _, req := range []api.CreateTerminalRequest{
		{ID: "../x"}, {ID: strings.Repeat("x", 200)}, {Cols: 5000}, {Rows: -1},
		{Shell: "/no/such/shell"}, {Cwd: "/no/such/dir"}, {User: "ghost"},
	} {
		_, err := c.CreateTerminal(ctx, req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("create %+v: %v", req, err)
		}
	}
	// A plain GET on the WebSocket endpoint is refused with 426.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.Socket)
	}}}
	resp, err := hc.Get("http://agent/v1/terminals/dup/ws")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("plain GET: HTTP %d", resp.StatusCode)
	}
}

func TestTerminalRunsAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	a, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "u", User: "tester"})
	tc := attachT(t, c, "u", agentclient.AttachOptions{})
	tc.send(t, "echo \"<$(id -u):$HOME:$(pwd)>\"; stat -c 'tty=%u' $(tty)\n")
	tc.waitOut(t, "<1000:"+a.TesterHome+":"+a.TesterHome+">")
	tc.waitOut(t, "tty=1000")
}

// TestTerminalSlowClientDoesNotBlockOthers: a client that never reads is
// dropped once its queue is full, and the others keep getting output.
func TestTerminalSlowClientDoesNotBlockOthers(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "slow"})
	ctx := context.Background()
	slow, err := c.AttachTerminal(ctx, "slow", agentclient.AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow() // never read: its socket buffer and queue fill up
	fast := attachT(t, c, "slow", agentclient.AttachOptions{})
	poll(t, "two clients", func() bool { return listT(t, c)["slow"].Clients == 2 })
	// The fast client paces the shell (a chunk, then wait for a newline), so
	// it never falls behind however slow the machine; the slow client
	// falls 5 MiB behind, well past its 2 MiB backlog plus socket buffers.
	fast.send(t, "i=0; while [ $i -lt 40 ]; do head -c 131072 /dev/zero | tr '\\000' b; echo \" chunk-$i-end\"; read x; i=$((i+1)); done; echo flood-'over'\n")
	for i := 0; i < 40; i++ {
		fast.waitOut(t, fmt.Sprintf(" chunk-%d-end", i))
		fast.send(t, "\n")
	}
	fast.waitOut(t, "flood-over\r\n")
	poll(t, "the slow client to be dropped", func() bool { return listT(t, c)["slow"].Clients == 1 })
}

// TestTerminalKeystrokeLatency measures keystroke → echo round trips
// through agentclient and the agent's pty (reported, not asserted: it
// depends on the machine).
func TestTerminalKeystrokeLatency(t *testing.T) {
	_, c := newClient(t)
	createT(t, c, api.CreateTerminalRequest{ID: "lat", Shell: "/bin/bash"})
	tc := attachT(t, c, "lat", agentclient.AttachOptions{})
	tc.send(t, "PS1='ready> '\n")
	tc.waitOut(t, "ready> ")
	var rtts []time.Duration
	for i := 0; i < 100; i++ {
		before := strings.Count(tc.output(), "k")
		start := time.Now()
		tc.send(t, "k")
		timeout := time.After(pollDeadline)
		for strings.Count(tc.output(), "k") <= before {
			select {
			case <-tc.changed:
			case <-timeout:
				t.Fatal("no echo of a keystroke")
			}
		}
		rtts = append(rtts, time.Since(start))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	t.Logf("keystroke→echo round trip over %d keystrokes: p50 %v p90 %v max %v", len(rtts), rtts[50], rtts[90], rtts[99])
	tc.send(t, "\x15") // ^U: clear the line
}

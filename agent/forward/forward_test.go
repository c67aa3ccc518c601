package forward_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
)

// fwdDeadline bounds every blocking step so a broken tunnel fails the test
// instead of hanging it; it is generous so slow machines never flake.
const fwdDeadline = 20 * time.Second

// fwdEcho listens on addr and, per connection, echoes until EOF, then writes
// "bye" and closes (so a test can check half-close is relayed).
func fwdEcho(t *testing.T, network, addr string) int {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.Write([]byte("bye"))
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// fwdRequest sends a raw forward request (plus any early bytes in the same
// write) on a fresh agent connection and reads the response head.
func fwdRequest(t *testing.T, sock, query string, upgrade bool, early string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(fwdDeadline))
	req := "GET /v1/forward?" + query + " HTTP/1.1\r\nHost: agent\r\n"
	if upgrade {
		req += "Connection: Upgrade\r\nUpgrade: " + wire.ForwardProtocol + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"+early); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, br, resp
}

func TestForwardRelaysBothWaysWithHalfClose(t *testing.T) {
	a := agenttest.Start(t)
	port := fwdEcho(t, "tcp4", "127.0.0.1:0")
	// "early" travels in the same write as the request: the agent must
	// hand those buffered bytes to the tunnel, not drop them.
	c, br, resp := fwdRequest(t, a.Socket, "port="+strconv.Itoa(port), true, "early;")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	if got := resp.Header.Get("Upgrade"); got != wire.ForwardProtocol {
		t.Fatalf("Upgrade %q", got)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("early;hello"))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "early;hello" {
		t.Fatalf("echo = %q, %v", got, err)
	}
	// Half-close: the service sees EOF, answers "bye" and closes; the
	// client reads that and then EOF.
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "bye" {
		t.Fatalf("after half-close read %q, %v; want \"bye\" then EOF", rest, err)
	}
}

func TestForwardFallsBackToIPv6Loopback(t *testing.T) {
	a := agenttest.Start(t)
	port := fwdEcho(t, "tcp6", "[::1]:0")
	// Make sure nothing answers on the IPv4 side of the same port, or the
	// test would not exercise the fallback.
	if c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
		c.Close()
		t.Skip("port also taken on 127.0.0.1")
	}
	c, br, resp := fwdRequest(t, a.Socket, "port="+strconv.Itoa(port), true, "")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	io.WriteString(c, "v6")
	got := make([]byte, 2)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "v6" {
		t.Fatalf("echo = %q, %v", got, err)
	}
}

// fwdFreePort returns a loopback port with nothing listening on it.
func fwdFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestForwardNothingListeningIs502(t *testing.T) {
	a := agenttest.Start(t)
	port := fwdFreePort(t)
	_, _, resp := fwdRequest(t, a.Socket, "port="+strconv.Itoa(port), true, "")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	var e api.Error
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	want := "nothing is listening on port " + strconv.Itoa(port) + " in the sandbox"
	if e.Code != "unavailable" || e.Message != want {
		t.Fatalf("error = %+v, want unavailable %q", e, want)
	}
}

func TestForwardRejectsBadRequests(t *testing.T) {
	a := agenttest.Start(t)
	port := fwdEcho(t, "tcp4", "127.0.0.1:0")
	for _, q := range []string{"", "port=", "port=0", "port=65536", "port=-1", "port=%2B" + strconv.Itoa(port),
		"port=0" + strconv.Itoa(port), "port=abc", "port=99999999999999999999", "port=80%20"} {
		_, _, resp := fwdRequest(t, a.Socket, q, true, "")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: status %d, want 400", q, resp.StatusCode)
		}
	}
	// A valid port without the upgrade headers is refused too (and the
	// control below shows the same port works with them).
	_, _, resp := fwdRequest(t, a.Socket, "port="+strconv.Itoa(port), false, "")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no upgrade headers: status %d, want 400", resp.StatusCode)
	}
	_, _, resp = fwdRequest(t, a.Socket, "port="+strconv.Itoa(port), true, "")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("control: status %d, want 101", resp.StatusCode)
	}
}

// Shutdown must end open tunnels: http.Server.Shutdown ignores hijacked
// connections, so without the hook a tunnel would outlive the agent's
// server (and hold the service's connection open).
func TestForwardShutdownEndsTunnels(t *testing.T) {
	reaper := agent.NewReaper(false)
	defer reaper.Stop()
	srv, err := agent.NewServer(agent.Config{Reaper: reaper, Version: "test", BaseEnv: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	sock := fwdSocket(t)
	ln, err := agent.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()

	// The service never closes by itself: only Shutdown can end the tunnel.
	svc, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := svc.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, br, resp := fwdRequest(t, sock, "port="+strconv.Itoa(svc.Addr().(*net.TCPAddr).Port), true, "")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var up net.Conn
	select {
	case up = <-accepted:
		defer up.Close()
	case <-time.After(fwdDeadline):
		t.Fatal("service never saw the tunnel's connection")
	}
	ctx, cancel := context.WithTimeout(context.Background(), fwdDeadline)
	defer cancel()
	srv.Shutdown(ctx)
	<-done
	c.SetReadDeadline(time.Now().Add(fwdDeadline))
	if _, err := br.ReadByte(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("tunnel still open after Shutdown: %v", err)
	}
	up.SetReadDeadline(time.Now().Add(fwdDeadline))
	if _, err := up.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("service connection still open after Shutdown: %v", err)
	}
}

func fwdSocket(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fwd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d + "/a.sock"
}

package agentclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/internal/errdefs"
)

const fwdDeadline = 20 * time.Second

func TestDialPortEcho(t *testing.T) {
	a := agenttest.Start(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	cl := agentclient.New(a.Socket)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), fwdDeadline)
	defer cancel()
	conn, err := cl.DialPort(ctx, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cancel() // the tunnel must outlive the handshake's context
	conn.SetDeadline(time.Now().Add(fwdDeadline))
	msg := strings.Repeat("tunnel ", 10000) // several buffers' worth
	go io.WriteString(conn, msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
		t.Fatalf("echo: %v (got %d bytes)", err, len(got))
	}
	// Half-close reaches the service as EOF; it closes, we see EOF.
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after half-close: %d, %v; want EOF", n, err)
	}
}

func TestDialPortNothingListening(t *testing.T) {
	a := agenttest.Start(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cl := agentclient.New(a.Socket)
	defer cl.Close()
	_, err = cl.DialPort(context.Background(), port)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "nothing is listening on port "+strconv.Itoa(port)) {
		t.Fatalf("err = %v, want unavailable: nothing is listening", err)
	}
}

func TestDialPortRejectsBadPortWithoutDialing(t *testing.T) {
	cl := agentclient.New("/nonexistent/agent.sock")
	for _, p := range []int{0, -1, 65536} {
		if _, err := cl.DialPort(context.Background(), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("port %d: err = %v, want invalid argument", p, err)
		}
	}
}

// fwdFakeAgent serves one canned behaviour per connection on a unix socket:
// it reads the request head, then calls answer.
func fwdFakeAgent(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fwdc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
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
				buf := make([]byte, 0, 1024)
				tmp := make([]byte, 1)
				for !strings.HasSuffix(string(buf), "\r\n\r\n") {
					if _, err := c.Read(tmp); err != nil {
						return
					}
					buf = append(buf, tmp[0])
				}
				answer(c)
			}()
		}
	}()
	return sock
}

// A service that speaks first may have its greeting arrive in the same
// read as the 101; it must not be lost.
func TestDialPortKeepsBytesAfterTheHandshake(t *testing.T) {
	sock := fwdFakeAgent(t, func(c net.Conn) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: berth-tcp\r\n\r\nSSH-2.0-greeting\r\n")
		time.Sleep(100 * time.Millisecond) // let the client read before close
	})
	cl := agentclient.New(sock)
	conn, err := cl.DialPort(context.Background(), 22)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(fwdDeadline))
	got, _ := io.ReadAll(conn)
	if string(got) != "SSH-2.0-greeting\r\n" {
		t.Fatalf("got %q", got)
	}
}

// A hostile agent cannot make the host read an unbounded header, nor
// hang the handshake past its deadline, nor switch to another protocol.
func TestDialPortBoundsHostileAgent(t *testing.T) {
	huge := fwdFakeAgent(t, func(c net.Conn) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nX: ")
		chunk := strings.Repeat("a", 64<<10)
		for i := 0; i < 1024; i++ { // up to 64 MiB unless the client hangs up
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
	})
	cl := agentclient.New(huge)
	if _, err := cl.DialPort(context.Background(), 80); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("huge header: err = %v", err)
	}

	silent := fwdFakeAgent(t, func(c net.Conn) { io.Copy(io.Discard, c) }) // never answers
	cl = agentclient.New(silent)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, err := cl.DialPort(ctx, 80); err == nil {
		t.Fatal("silent agent: no error")
	}
	if d := time.Since(t0); d > fwdDeadline/2 {
		t.Fatalf("silent agent: DialPort waited %s past its context", d)
	}
	cl.CallTimeout = 50 * time.Millisecond
	if _, err := cl.DialPort(context.Background(), 80); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("silent agent with CallTimeout: err = %v", err)
	}

	other := fwdFakeAgent(t, func(c net.Conn) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	})
	cl = agentclient.New(other)
	if _, err := cl.DialPort(context.Background(), 80); err == nil {
		t.Fatal("agent switched to another protocol and DialPort accepted it")
	}
}

package preview_test

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/preview"
)

// The whole path with a real agent: proxy → agent unix socket → port
// tunnel → a service on 127.0.0.1. (In a sandbox the agent's 127.0.0.1 is
// the sandbox's own loopback; here it is the host's.)
func TestThroughAgentTunnel(t *testing.T) {
	a := agenttest.Start(t)
	cl := agentclient.New(a.Socket)
	defer cl.Close()
	e := newEnv(t, nil)
	viaAgent := func(addr string) preview.DialFunc {
		_, ps, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(ps)
		return func(ctx context.Context) (net.Conn, error) { return cl.DialPort(ctx, port) }
	}

	// HTTP, and time from a new exposure to its first proxied response,
	// each over a new client connection and a new tunnel.
	svc := echoUpstream(t, "svc")
	var times []time.Duration
	for i := 0; i < 25; i++ {
		t0 := time.Now()
		exp := e.expose("agent-box", 8080, "", false)
		e.setDial(exp, viaAgent(svc))
		e.hc.Transport.(*http.Transport).CloseIdleConnections()
		resp := e.get(e.url(exp))
		times = append(times, time.Since(t0))
		if s := decodeSeen(t, resp); s.Service != "svc" {
			t.Fatalf("routed to %q", s.Service)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("new exposure → first proxied response via agent tunnel (n=%d): min %s, p50 %s, max %s",
		len(times), times[0], times[len(times)/2], times[len(times)-1])

	// WebSocket through the tunnel.
	ws := e.expose("agent-box", 9000, "", false)
	e.setDial(ws, viaAgent(wsEcho(t)))
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	c, _, err := e.dialWS(ctx, e.url(ws), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageBinary, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, p, err := c.Read(ctx); err != nil || string(p) != "ping" {
		t.Fatalf("echo %q, %v", p, err)
	}

	// Streaming through the tunnel.
	g := &gatedStream{contentType: "text/event-stream", release: make(chan struct{})}
	sse := e.expose("agent-box", 9001, "", false)
	e.setDial(sse, viaAgent(upstream(t, g)))
	if !firstChunkBeforeEnd(t, e.hc, e.url(sse), g, deadline) {
		t.Fatal("SSE buffered through the agent tunnel")
	}

	// Nothing listening: the agent's words, as a 502.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	gone := e.expose("agent-box", 9002, "", false)
	e.setDial(gone, viaAgent(dead))
	_, port, _ := net.SplitHostPort(dead)
	er := decodeError(t, e.get(e.url(gone)), http.StatusBadGateway, "unavailable")
	if er.Message != "nothing is listening on port "+port+" in the sandbox" {
		t.Errorf("message %q", er.Message)
	}
}

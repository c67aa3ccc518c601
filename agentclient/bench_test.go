package agentclient

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/api"
)

// BenchmarkExecTrue is one exec round trip of `true` against an in-process
// agent over its unix socket, with connection reuse.
func BenchmarkExecTrue(b *testing.B) {
	a := agenttest.Start(b)
	c := New(a.Socket)
	defer c.Close()
	ctx := context.Background()
	if err := c.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	req := api.ExecRequest{Argv: []string{"/bin/true"}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := c.Exec(ctx, req, nil, nil)
		if err != nil || st.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", st, err)
		}
	}
}

// BenchmarkHealth is the bare request round trip, without a process.
func BenchmarkHealth(b *testing.B) {
	a := agenttest.Start(b)
	c := New(a.Socket)
	defer c.Close()
	ctx := context.Background()
	if err := c.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Health(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWaitReadyRealAgentIsFast(t *testing.T) {
	a := agenttest.Start(t)
	c := New(a.Socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Exec(ctx, api.ExecRequest{Command: "exit 5"}, nil, nil)
	if err != nil || st.ExitCode != 5 {
		t.Fatalf("exec: %+v %v", st, err)
	}
}

// TestConnectionsAreReused guards exec latency: sequential calls must share
// one pooled connection, not dial per call.
func TestConnectionsAreReused(t *testing.T) {
	a := agenttest.Start(t)
	var dials atomic.Int32
	c := newClient(a.Socket, func(ctx context.Context, path string) (net.Conn, error) {
		dials.Add(1)
		return dialPinned(ctx, path)
	})
	defer c.Close()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if st, err := c.Exec(ctx, api.ExecRequest{Argv: []string{"echo", "x"}}, io.Discard, nil); err != nil || st.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", st, err)
		}
		if _, err := c.Stat(ctx, a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for 40 sequential calls, want 1", n)
	}
}

package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// TestShutdownEndsStreams: Server.Shutdown must not wait out its context
// for watch streams (they never end by themselves) and must kill terminal
// shells, whose WebSockets http.Server does not track.
func TestShutdownEndsStreams(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent starts its terminal as root")
	}
	dir, err := os.MkdirTemp("", "agsd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	reaper := agent.NewReaper(false)
	defer reaper.Stop()
	srv, err := agent.NewServer(agent.Config{Reaper: reaper, EtcDir: dir, BaseEnv: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := agent.Listen(filepath.Join(dir, "a.sock"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	c := agentclient.New(filepath.Join(dir, "a.sock"))
	defer c.Close()
	ctx := context.Background()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, dir, agentclient.WatchOptions{Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	term, err := c.CreateTerminal(ctx, api.CreateTerminalRequest{ID: "sd", Shell: "/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	tc := attachT(t, c, "sd", agentclient.AttachOptions{})
	tc.waitCtl(t, api.TerminalReady)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("shutdown took %v: it waited for the streams to time out", d)
	}
	var last api.WatchEvent
	for e := range w.Events() {
		last = e
	}
	if last.Type != api.WatchStopped {
		t.Fatalf("watch ended with %+v (err %v), want a stopped event", last, w.Err())
	}
	if m := tc.waitCtl(t, api.TerminalExit); m.Signal != "SIGKILL" {
		t.Fatalf("terminal exit at shutdown: %+v", m)
	}
	if !procGone(term.Pid) {
		t.Fatal("shell survived shutdown")
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

package agenttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/agent/wire"
)

// Agent is a running in-process agent.
type Agent struct {
	Socket string // the unix socket to dial
	Dir    string // a scratch directory, readable by every user
	Home   string // root's home in the fake passwd; relative paths resolve here
	// TesterHome is the home of "tester" (uid 1000, gid 1000, also in
	// group "extra" 2000).
	TesterHome string
}

// needsRoot is why an agent cannot start: its default user is root, its
// fake passwd has other users, and it runs commands and writes files as
// them (setuid, chown).
const needsRoot = "needs root: the in-process agent runs commands and writes files as other users"

// Available reports whether Start can start an agent here (it needs root).
// A test that starts agents off its own goroutine (behind an HTTP handler,
// where Start's skip cannot end the test) asks first.
func Available() bool { return os.Geteuid() == 0 }

// Start starts an agent whose default user is root and stops it when the
// test ends.
func Start(tb testing.TB) *Agent {
	tb.Helper()
	return StartWith(tb, nil)
}

// StartWith is Start with a hook to adjust the agent's Config.
func StartWith(tb testing.TB, adjust func(*agent.Config)) *Agent {
	tb.Helper()
	if !Available() {
		tb.Skip(needsRoot)
	}
	// Unix socket paths are limited to 108 bytes; test names make
	// t.TempDir paths long, so the socket gets its own short dir.
	sockDir, err := os.MkdirTemp("", "agt")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(sockDir) })
	dir, err := os.MkdirTemp("", "agentfs")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	// Other users (tester, nobody) must be able to reach their homes.
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	a := &Agent{
		Socket:     filepath.Join(sockDir, wire.SocketName),
		Dir:        dir,
		Home:       filepath.Join(dir, "root"),
		TesterHome: filepath.Join(dir, "tester"),
	}
	etc := filepath.Join(dir, "etc")
	for _, d := range []string{etc, a.Home, a.TesterHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		os.Chown(a.TesterHome, 1000, 1000)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:%s:/bin/sh\n# a comment\ntester:x:1000:1000:Test User:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", a.Home, a.TesterHome)
	group := "root:x:0:\ntester:x:1000:\nextra:x:2000:someone,tester\nnogroup:x:65534:\n"
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "group"), []byte(group), 0o644); err != nil {
		tb.Fatal(err)
	}

	reaper := agent.NewReaper(false) // never steal other children's statuses
	cfg := agent.Config{
		DefaultUser: "root",
		Version:     "test",
		Reaper:      reaper,
		EtcDir:      etc,
		BaseEnv:     []string{"PATH=" + os.Getenv("PATH"), "BERTH_BASE=1"},
	}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := agent.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := agent.Listen(a.Socket)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
		reaper.Stop()
	})
	return a
}

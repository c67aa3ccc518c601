package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// shortDir returns a temp dir short enough for unix socket paths.
func shortDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "acl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeAgent serves h on a unix socket at path; it plays a hostile or
// broken agent.
func fakeAgent(t testing.TB, path string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

func healthy(protocol int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Health{Status: "ok", Version: "fake", Protocol: protocol})
	}
}

func naiveDial(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}

// TestDialRefusesPlantedSymlink is DESIGN.md decision 2: sandbox root
// replaces agent.sock (in a directory it can write) with a symlink to a
// host socket such as /var/run/docker.sock.
func TestDialRefusesPlantedSymlink(t *testing.T) {
	hostDir, sandboxDir := shortDir(t), shortDir(t)
	var hits atomic.Int32
	hostSock := filepath.Join(hostDir, "docker.sock")
	fakeAgent(t, hostSock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		healthy(wire.ProtocolVersion)(w, r)
	}))
	link := filepath.Join(sandboxDir, "agent.sock")
	if err := os.Symlink(hostSock, link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	c := New(link)
	defer c.Close()
	_, err := c.Health(ctx)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("dial through a planted symlink: %v", err)
	}
	if err := c.WaitReady(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("WaitReady must give up on a planted symlink: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the host socket received %d requests", n)
	}

	// Negative control: a plain connect(2) on the path reaches the host
	// socket's server, so the probe would catch a regression.
	naive := newClient(link, naiveDial)
	defer naive.Close()
	if _, err := naive.Health(ctx); err != nil {
		t.Fatalf("negative control: naive dial failed: %v", err)
	}
	if hits.Load() != 1 {
		t.Fatal("negative control: naive dial did not reach the host socket")
	}

	// Other planted file types are refused too.
	for name, mk := range map[string]func(string) error{
		"regular file": func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"directory":    func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		p := filepath.Join(sandboxDir, strings.ReplaceAll(name, " ", "-"))
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		if _, err := New(p).Health(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestDialPinnedReachesRealSocket(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, sock, healthy(wire.ProtocolVersion))
	h, err := New(sock).Health(context.Background())
	if err != nil || h.Version != "fake" {
		t.Fatalf("health: %+v %v", h, err)
	}
}

func TestProtocolMismatchRefused(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, sock, healthy(wire.ProtocolVersion+1))
	c := New(sock)
	_, err := c.Health(context.Background())
	want := "agent protocol 2 does not match berth's 1"
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), want) {
		t.Fatalf("health: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.WaitReady(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) || time.Since(start) > 10*time.Second {
		t.Fatalf("WaitReady kept polling a mismatched agent: %v", err)
	}
}

func TestWaitReady(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	c := New(sock)
	// Nothing listens yet: polls until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := c.WaitReady(ctx)
	cancel()
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("WaitReady without an agent: %v", err)
	}
	// The agent appears later.
	go func() {
		time.Sleep(30 * time.Millisecond)
		fakeAgent(t, sock, healthy(wire.ProtocolVersion))
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// streamAgent answers /v1/exec by running fn on a started frame stream.
func streamAgent(t *testing.T, fn func(w http.ResponseWriter, r *http.Request, flush func())) *Client {
	t.Helper()
	sock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ExecContentType)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		flush := func() { rc.Flush() }
		flush()
		fn(w, r, flush)
	}))
	c := New(sock)
	t.Cleanup(c.Close)
	return c
}

func TestExecOversizedFrameRejected(t *testing.T) {
	c := streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		w.Write([]byte{byte(wire.Stdout), 0x7f, 0xff, 0xff, 0xff}) // claims 2 GiB
		w.Write(make([]byte, 4096))
		flush()
	})
	st, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"true"}}, nil, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "protocol error") {
		t.Fatalf("oversized frame: %+v %v", st, err)
	}
	if st != (api.ExitStatus{}) {
		t.Fatalf("invented a status: %+v", st)
	}
}

func TestExecStreamEndsWithoutExit(t *testing.T) {
	c := streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		wire.WriteFrame(w, wire.Stdout, []byte("partial"))
		flush()
		// The agent dies: the stream ends with no exit frame.
	})
	var out strings.Builder
	st, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"true"}}, &out, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "sandbox agent stopped responding") {
		t.Fatalf("no exit frame: %+v %v", st, err)
	}
	if st != (api.ExitStatus{}) || out.String() != "partial" {
		t.Fatalf("status %+v output %q", st, out.String())
	}

	// Cut mid-frame by a hijacked connection closing.
	c = streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		w.Write([]byte{byte(wire.Exit), 0, 0, 0, 100, '{'})
		flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	if _, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"true"}}, nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("cut mid-frame: %v", err)
	}
}

func TestExecStallGivesUp(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c := streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		wire.WriteFrame(w, wire.Stdout, []byte("hi"))
		flush()
		select { // then silence: no frames, no heartbeats
		case <-release:
		case <-r.Context().Done():
		}
	})
	c.StallTimeout = 200 * time.Millisecond
	start := time.Now()
	_, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"true"}}, nil, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "sandbox agent stopped responding") {
		t.Fatalf("stall: %v", err)
	}
	if el := time.Since(start); el < 200*time.Millisecond || el > 20*time.Second {
		t.Fatalf("gave up after %v", el)
	}

	// An agent that never even sends response headers.
	sock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	c2 := New(sock)
	c2.StallTimeout = 200 * time.Millisecond
	if _, err := c2.Exec(context.Background(), api.ExecRequest{Argv: []string{"true"}}, nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("no headers: %v", err)
	}
}

func TestExecHeartbeatsKeepStreamAlive(t *testing.T) {
	c := streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		// Heartbeats 20 ms apart for 10× the stall timeout.
		for i := 0; i < 100; i++ {
			wire.WriteFrame(w, wire.Heartbeat, nil)
			flush()
			time.Sleep(20 * time.Millisecond)
		}
		body, _ := json.Marshal(api.ExitStatus{ExitCode: 4})
		wire.WriteFrame(w, wire.Exit, body)
	})
	c.StallTimeout = time.Second / 5
	st, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"true"}}, nil, nil)
	if err != nil || st.ExitCode != 4 {
		t.Fatalf("heartbeats: %+v %v", st, err)
	}
}

func TestExecErrorFrameAndUnknownFrame(t *testing.T) {
	c := streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		body, _ := json.Marshal(api.Error{Code: "resource_exhausted", Message: "out of pids"})
		wire.WriteFrame(w, wire.Error, body)
	})
	if _, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"x"}}, nil, nil); !errors.Is(err, errdefs.ErrResourceExhausted) || err.Error() != "out of pids" {
		t.Fatalf("error frame: %v", err)
	}
	c = streamAgent(t, func(w http.ResponseWriter, r *http.Request, flush func()) {
		wire.WriteFrame(w, wire.FrameType(99), []byte("?"))
	})
	if _, err := c.Exec(context.Background(), api.ExecRequest{Argv: []string{"x"}}, nil, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("unknown frame: %v", err)
	}
}

func TestErrorBodies(t *testing.T) {
	sock := filepath.Join(shortDir(t), "agent.sock")
	fakeAgent(t, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "/notfound":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.Error{Code: "not_found", Message: "stat /notfound: no such file or directory"})
		case "/full":
			w.WriteHeader(http.StatusTooManyRequests)
			json.NewEncoder(w).Encode(api.WireErrorBody(errdefs.NoSpace("write /full: no space left on device")))
		case "/huge":
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"code":"invalid_argument","message":"` + strings.Repeat("a", 1<<20) + `"}`))
		case "/garbage":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("<html>"))
		case "/bighead":
			w.Header().Set("X-Junk", strings.Repeat("j", 1<<20))
			w.WriteHeader(http.StatusOK)
		case "/hugelist":
			w.Write([]byte(`{"files":[`))
			chunk := []byte(strings.Repeat(`{"path":"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},`, 1000))
			for n := 0; n <= maxJSONBody; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/hang":
			<-r.Context().Done()
		}
	}))
	c := New(sock)
	ctx := context.Background()
	if _, err := c.Stat(ctx, "/notfound"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("not found: %v", err)
	}
	// The refinement crosses the socket (the E2B face answers it 507).
	if _, err := c.Stat(ctx, "/full"); !errdefs.IsKind(err, errdefs.ErrNoSpace) || errdefs.Code(err) != "resource_exhausted" || err.Error() != "write /full: no space left on device" {
		t.Errorf("full disk: %v (%s)", err, errdefs.WireCode(err))
	}
	if _, err := c.Stat(ctx, "/huge"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("huge error body: %v", err)
	}
	if _, err := c.Stat(ctx, "/garbage"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("garbage error body: %v", err)
	}
	if _, err := c.Stat(ctx, "/bighead"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("huge header: %v", err)
	}
	if _, err := c.ListFiles(ctx, "/hugelist", false); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("list over the cap: %v", err)
	}
	c.CallTimeout = 100 * time.Millisecond
	if _, err := c.Stat(ctx, "/hang"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("hanging agent: %v", err)
	}
}

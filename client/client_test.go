package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/server"
)

const key = "k-123"

// fake implements control.Backend; methods it does not override panic
// through the nil embedded interface, which the server turns into a 500.
type fake struct {
	control.Backend
	mu    sync.Mutex
	boxes map[string]api.Sandbox
	files map[string][]byte
	exec  func(ctx context.Context, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error)
}

func (f *fake) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb, ok := f.boxes[req.Name]; ok {
		if createOnly {
			return sb, false, errdefs.AlreadyExists("sandbox %q already exists", req.Name)
		}
		return sb, false, nil
	}
	sb := api.Sandbox{Name: req.Name, State: api.StateRunning, Labels: req.Labels}
	f.boxes[req.Name] = sb
	return sb, true, nil
}

func (f *fake) Get(ctx context.Context, name string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb, ok := f.boxes[name]; ok {
		return sb, nil
	}
	return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
}

func (f *fake) List(ctx context.Context, lf control.ListFilter) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for _, sb := range f.boxes {
		if v, ok := lf.Labels["team"]; ok && sb.Labels["team"] != v {
			continue
		}
		out = append(out, sb)
	}
	return out, nil
}

func (f *fake) Destroy(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.boxes, name)
	return nil
}

func (f *fake) Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	if f.exec != nil {
		return f.exec(ctx, req, stdout, stderr)
	}
	if req.Command == "true" {
		return api.ExitStatus{}, nil
	}
	fmt.Fprintf(stdout, "out:%s", strings.Join(req.Argv, " "))
	fmt.Fprint(stderr, "err")
	return api.ExitStatus{ExitCode: 2}, nil
}

func (f *fake) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[path]
	if !ok {
		return nil, errdefs.NotFound("%s: no such file", path)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fake) WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
	b, err := io.ReadAll(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = b
	return err
}

func (f *fake) PullImage(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error) {
	if progress != nil {
		progress(api.Progress{Message: "pulling", Current: 1, Total: 2})
	}
	if req.Ref == "bad" {
		return api.Image{}, errdefs.NotFound("manifest unknown")
	}
	return api.Image{Ref: req.Ref, Digest: "sha256:ab"}, nil
}

func (f *fake) RemoveImage(ctx context.Context, ref string) error {
	if ref != "docker.io/library/alpine:3.20" {
		return errdefs.NotFound("image %q not found", ref)
	}
	return nil
}

func newFake() *fake { return &fake{boxes: map[string]api.Sandbox{}, files: map[string][]byte{}} }

// start serves f and counts new TCP connections.
func start(t testing.TB, f *fake) (*Client, *atomic.Int64) {
	t.Helper()
	ts := httptest.NewUnstartedServer(server.New(f, server.Options{APIKey: key}))
	var conns atomic.Int64
	ts.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return New(ts.URL, key), &conns
}

func TestErrorsKeepTheirKind(t *testing.T) {
	c, _ := start(t, newFake())
	ctx := context.Background()
	if _, err := c.Get(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"nope" not found`) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := c.Create(ctx, api.CreateSandboxRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, api.CreateSandboxRequest{Name: "a"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := c.Create(ctx, api.CreateSandboxRequest{Name: "../a"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad name: %v", err)
	}
	bad := New(c.BaseURL(), "wrong")
	if _, err := bad.List(ctx, "", nil); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("bad key: %v", err)
	}
	if _, err := bad.Health(ctx); err != nil {
		t.Fatalf("health needs no key: %v", err)
	}
	dead := New("http://127.0.0.1:1", key)
	if _, err := dead.Health(ctx); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "berth serve") {
		t.Fatalf("dead server: %v", err)
	}
}

func TestSandboxCalls(t *testing.T) {
	c, _ := start(t, newFake())
	ctx := context.Background()
	sb, created, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "x", Labels: map[string]string{"team": "a"}})
	if err != nil || !created || sb.Name != "x" {
		t.Fatalf("first: %+v %v %v", sb, created, err)
	}
	if _, created, err = c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "x"}); err != nil || created {
		t.Fatalf("second: %v %v", created, err)
	}
	c.Create(ctx, api.CreateSandboxRequest{Name: "y"})
	list, err := c.List(ctx, "running", map[string]string{"team": "a"})
	if err != nil || len(list) != 1 || list[0].Name != "x" {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := c.Destroy(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, "y", api.ExecRequest{Argv: []string{"echo", "hi"}})
	if err != nil || res.Stdout != "out:echo hi" || res.Stderr != "err" || res.ExitCode != 2 {
		t.Fatalf("exec %+v %v", res, err)
	}
}

// Many execs must share one connection: the benchmark measures exec round
// trips through this client, and a handshake per call would dominate.
func TestExecReusesConnection(t *testing.T) {
	c, conns := start(t, newFake())
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		if _, err := c.Exec(ctx, "y", api.ExecRequest{Command: "true"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecStream(ctx, "y", api.ExecRequest{Command: "true"}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("100 execs opened %d connections, want 1", n)
	}
}

func TestExecStream(t *testing.T) {
	f := newFake()
	c, _ := start(t, f)
	ctx := context.Background()
	var out, errb bytes.Buffer
	st, err := c.ExecStream(ctx, "y", api.ExecRequest{Argv: []string{"ls"}}, &out, &errb)
	if err != nil || st.ExitCode != 2 || out.String() != "out:ls" || errb.String() != "err" {
		t.Fatalf("%+v %v %q %q", st, err, out.String(), errb.String())
	}

	f.exec = func(ctx context.Context, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		stdout.Write([]byte("part"))
		return api.ExitStatus{ExitCode: 0}, errdefs.Unavailable("agent lost")
	}
	out.Reset()
	st, err = c.ExecStream(ctx, "y", api.ExecRequest{Command: "x"}, &out, nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || err.Error() != "agent lost" || out.String() != "part" {
		t.Fatalf("mid-stream error: %+v %v", st, err)
	}

	f.exec = func(ctx context.Context, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		return api.ExitStatus{}, errdefs.NotFound("sandbox %q not found", "zz")
	}
	if _, err := c.ExecStream(ctx, "zz", api.ExecRequest{Command: "x"}, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("error before output: %v", err)
	}
}

func TestExecStreamCancel(t *testing.T) {
	f := newFake()
	started := make(chan struct{})
	f.exec = func(ctx context.Context, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
		stdout.Write([]byte("go"))
		close(started)
		<-ctx.Done()
		return api.ExitStatus{}, ctx.Err()
	}
	c, _ := start(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := c.ExecStream(ctx, "y", api.ExecRequest{Command: "sleep"}, nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// rawServer answers every request with handler, standing in for a broken
// or hostile server.
func rawServer(t *testing.T, h http.HandlerFunc) *Client {
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return New(ts.URL, key)
}

// A stream that stops without exit or error must not yield an exit code.
func TestExecStreamTruncatedIsUnavailable(t *testing.T) {
	for name, body := range map[string]string{
		"no terminal":       "event: stdout\ndata: {\"type\":\"stdout\",\"data\":\"aGk=\"}\n\n",
		"cut inside exit":   "event: exit\ndata: {\"type\":\"exit\",\"exit\":{\"exitCode\":0}}",
		"only pings":        ": ping\n\n: ping\n\n",
		"exit without body": "event: exit\ndata: {\"type\":\"exit\"}\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, body)
			})
			st, err := c.ExecStream(context.Background(), "y", api.ExecRequest{Command: "x"}, nil, nil)
			if err == nil {
				t.Fatalf("got exit status %+v from a truncated stream", st)
			}
			if name != "exit without body" && !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("err %v, want unavailable", err)
			}
		})
	}
}

func TestHostileServerBounded(t *testing.T) {
	huge := strings.Repeat("A", 8<<20)
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: stdout\ndata: "+huge+"\n\n")
			return
		}
		w.WriteHeader(500)
		io.WriteString(w, huge)
	})
	_, err := c.Get(context.Background(), "y")
	if err == nil || len(err.Error()) > 1000 {
		t.Fatalf("error of %d bytes from a huge error body", len(fmt.Sprint(err)))
	}
	if _, err := c.ExecStream(context.Background(), "y", api.ExecRequest{Command: "x"}, nil, nil); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("huge event line: %v", err)
	}
}

func TestFilesAndImages(t *testing.T) {
	c, _ := start(t, newFake())
	ctx := context.Background()
	data := bytes.Repeat([]byte{0, 1, 2, 255}, 1<<18) // 1 MiB, binary
	if err := c.WriteFile(ctx, "y", "/w/f", bytes.NewReader(data), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, "y", "/w/f")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d bytes, %v", len(got), err)
	}
	if _, err := c.ReadFile(ctx, "y", "/nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}

	var events []api.Progress
	img, err := c.PullImage(ctx, api.PullRequest{Ref: "alpine"}, func(p api.Progress) { events = append(events, p) })
	if err != nil || img.Digest != "sha256:ab" || len(events) != 1 || events[0].Message != "pulling" {
		t.Fatalf("pull %+v %v %+v", img, err, events)
	}
	if img, err := c.PullImage(ctx, api.PullRequest{Ref: "alpine"}, nil); err != nil || img.Ref != "alpine" {
		t.Fatalf("plain pull %+v %v", img, err)
	}
	if _, err := c.PullImage(ctx, api.PullRequest{Ref: "bad"}, func(api.Progress) {}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("failed pull: %v", err)
	}
	if err := c.RemoveImage(ctx, "docker.io/library/alpine:3.20"); err != nil {
		t.Fatalf("remove by ref with slashes: %v", err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvURL, "")
	t.Setenv(EnvAPIKey, "")
	t.Setenv(EnvData, "")
	_, err := FromEnv(dir)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "berth serve") || !strings.Contains(err.Error(), EnvURL) {
		t.Fatalf("no config: %v", err)
	}
	if err := SaveConfig(dir, Config{URL: "http://127.0.0.1:7070", APIKey: "file-key"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, ConfigFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode %v %v", fi.Mode(), err)
	}
	c, err := FromEnv(dir)
	if err != nil || c.BaseURL() != "http://127.0.0.1:7070" || c.auth != "Bearer file-key" {
		t.Fatalf("from file: %+v %v", c, err)
	}
	t.Setenv(EnvURL, "http://10.0.0.1:1")
	c, _ = FromEnv(dir)
	if c.BaseURL() != "http://10.0.0.1:1" || c.auth != "Bearer file-key" {
		t.Fatalf("env url should win, file key fill in: %s %s", c.BaseURL(), c.auth)
	}
	c, _ = Load(dir, "http://flag:2", "flag-key")
	if c.BaseURL() != "http://flag:2" || c.auth != "Bearer flag-key" {
		t.Fatalf("explicit values should win: %s %s", c.BaseURL(), c.auth)
	}
	t.Setenv(EnvData, dir)
	t.Setenv(EnvURL, "")
	if c, err := FromEnv(""); err != nil || c.BaseURL() != "http://127.0.0.1:7070" {
		t.Fatalf("BERTH_DATA: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte("{"), 0o600)
	if _, err := FromEnv(dir); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("corrupt config: %v", err)
	}
}

package remote_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent/agenttest"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/nodetest"
	"github.com/berth-sh/berth/node/remote"
)

const token = "cluster-secret-for-tests"

func newAgent(tb testing.TB) string { return agenttest.Start(tb).Socket }

// serve puts n behind a real loopback listener and returns a client of it.
func serve(tb testing.TB, n node.Node) (*remote.Client, *httptest.Server) {
	tb.Helper()
	srv := httptest.NewServer(remote.NewHandler(n, token))
	tb.Cleanup(srv.Close)
	return remote.NewClient(srv.URL, token, nil), srv
}

// TestConformance runs the node contract through the client and handler:
// the fake behind a loopback HTTP server.
// Without root the fake has no agents (agenttest needs root, and its skip
// would run on the handler's goroutine), so the agent checks skip.
func TestConformance(t *testing.T) {
	agents, opts := conformanceAgents()
	nodetest.Run(t, func(t *testing.T) node.Node {
		c, _ := serve(t, nodetest.NewFake(t, agents))
		return c
	}, opts...)
}

// conformanceAgents is the fake's agents and the suite's options: real
// agents as root; none, and the agent checks skipped, otherwise.
func conformanceAgents() (func(testing.TB) string, []nodetest.Option) {
	if !agenttest.Available() {
		return nil, []nodetest.Option{nodetest.WithoutAgent()}
	}
	return newAgent, nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// refusing is a node that fails the test if anything reaches it.
type refusing struct {
	node.Node
	t *testing.T
}

func (r refusing) Status(context.Context, string) (node.Status, error) {
	r.t.Error("the request reached the node")
	return node.Status{}, nil
}

func (r refusing) Start(context.Context, string, node.StartOptions) error {
	r.t.Error("the request reached the node")
	return nil
}

func TestAuth(t *testing.T) {
	_, srv := serve(t, refusing{t: t})
	for _, auth := range []string{"", "Bearer ", "Bearer wrong", "Basic " + token, "bearer " + token, "Bearer " + token + "x"} {
		req, _ := http.NewRequest("GET", srv.URL+remote.Prefix+"/sandboxes/x", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != nil || e.Code != "unauthenticated" {
			t.Errorf("Authorization %q: HTTP %d, body %+v (%v); want 401 unauthenticated", auth, resp.StatusCode, e, err)
		}
	}
	wrong := remote.NewClient(srv.URL, "wrong", nil)
	if _, err := wrong.Status(ctxT(t), "x"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("client with a wrong token: %v, want unauthenticated", err)
	}
	if _, _, err := wrong.Agent(ctxT(t), "x"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("agent tunnel with a wrong token: %v, want unauthenticated", err)
	}
	// A node configured without a credential serves nobody.
	open := httptest.NewServer(remote.NewHandler(refusing{t: t}, ""))
	defer open.Close()
	if _, err := remote.NewClient(open.URL, "", nil).Status(ctxT(t), "x"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("empty configured token: %v, want unauthenticated", err)
	}
}

func post(t *testing.T, url, body string) (int, api.Error) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e
}

func TestBadRequests(t *testing.T) {
	_, srv := serve(t, refusing{t: t})
	base := srv.URL + remote.Prefix + "/sandboxes/"
	for _, c := range []struct{ path, body, code string }{
		{"ok-name/start", "{not json", "invalid_argument"},
		{"ok-name/start", "", "invalid_argument"},
		{"ok-name/start", `{"image":"` + strings.Repeat("a", 2<<20) + `"}`, "invalid_argument"},
		{"Bad_Name/start", "{}", "invalid_argument"},
		{"-x/start", "{}", "invalid_argument"},
		{"ok-name/nothing", "{}", "not_found"},
	} {
		status, e := post(t, base+c.path, c.body)
		if e.Code != c.code || status != api.HTTPStatus(errdefs.FromCode(c.code, "")) {
			t.Errorf("POST %s (%d bytes): HTTP %d %+v, want %s", c.path, len(c.body), status, e, c.code)
		}
	}
	c := remote.NewClient(srv.URL, token, nil)
	if err := c.Start(ctxT(t), "Bad_Name", node.StartOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("client Start(Bad_Name) = %v", err)
	}
	if _, err := remote.NewClient("not a url", token, nil).Info(ctxT(t)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("client with a bad base URL: %v", err)
	}
}

// failing answers every Start with err.
type failing struct {
	node.Node
	err error
}

func (f failing) Start(context.Context, string, node.StartOptions) error { return f.err }

func TestErrorKindsCross(t *testing.T) {
	for _, kind := range []error{errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrInvalidArgument,
		errdefs.ErrFailedPrecondition, errdefs.ErrExpired, errdefs.ErrUnavailable, errdefs.ErrResourceExhausted,
		errdefs.ErrPermissionDenied, errdefs.ErrUnauthenticated, errdefs.ErrDeadlineExceeded, errdefs.ErrInternal} {
		c, _ := serve(t, failing{err: errdefs.New(kind, "the node says %s", kind)})
		err := c.Start(ctxT(t), "x", node.StartOptions{})
		if !errors.Is(err, kind) || err.Error() != "the node says "+kind.Error() {
			t.Errorf("kind %v crossed as %v (%q)", kind, errdefs.Code(err), err)
		}
	}
	// A kind the client does not know is internal, with its message.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, `{"code":"from_the_future","message":"a new kind"}`)
	}))
	defer srv.Close()
	err := remote.NewClient(srv.URL, token, nil).Start(ctxT(t), "x", node.StartOptions{})
	if !errors.Is(err, errdefs.ErrInternal) || err.Error() != "a new kind" {
		t.Errorf("unknown code: %v (%s)", err, errdefs.Code(err))
	}
	// A body that is no envelope (a proxy's page) is unavailable.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer page.Close()
	if err := remote.NewClient(page.URL, token, nil).Start(ctxT(t), "x", node.StartOptions{}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("non-envelope answer: %v", err)
	}
}

func TestControlCallsCarryTheirData(t *testing.T) {
	fake := nodetest.NewFake(t, nil)
	fake.ImageDigests = map[string]string{"base": "sha256:abc"}
	c, _ := serve(t, fake)
	ctx := ctxT(t)
	o := node.StartOptions{Image: "base", Labels: map[string]string{"team": "x"}, Entrypoint: []string{"sleep", "1d"}}
	if err := c.Start(ctx, "sb", o); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, "sb")
	if err != nil || !st.Running || st.Sandbox.Image != "base" || st.Sandbox.Labels["team"] != "x" || st.LastActive.IsZero() {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := c.Signal(ctx, "sb", 15); err != nil {
		t.Fatal(err)
	}
	if got := fake.Signals("sb"); len(got) != 1 || got[0] != 15 {
		t.Fatalf("signals on the node = %v, want [15]", got)
	}
	if err := c.SetInactivityTimeout(ctx, "sb", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	sn, err := c.Snapshot(ctx, "sb", node.SnapshotOptions{Name: "first", TTL: time.Hour})
	if err != nil || sn.ID == "" || sn.Name != "first" || sn.BaseImageDigest != "sha256:abc" {
		t.Fatalf("Snapshot = %+v, %v", sn, err)
	}
	im, err := c.Images(ctx)
	if err != nil || im["base"] != "sha256:abc" {
		t.Fatalf("Images = %v, %v", im, err)
	}
	in, err := c.Info(ctx)
	if err != nil || in.ID != "fake" || in.Capacity.Sandboxes != 1 || len(in.Images) != 1 {
		t.Fatalf("Info = %+v, %v", in, err)
	}
	// A conditional stop honours IdleSince across the wire.
	if stopped, err := c.Stop(ctx, "sb", node.StopOptions{IdleSince: time.Now().Add(-time.Hour)}); err != nil || stopped {
		t.Fatalf("Stop with an old IdleSince = %v, %v; want false (active since)", stopped, err)
	}
	if stopped, err := c.Stop(ctx, "sb", node.StopOptions{IdleSince: time.Now()}); err != nil || !stopped {
		t.Fatalf("Stop with IdleSince now = %v, %v; want true", stopped, err)
	}
}

// TestExecCancelKillsOnNode: the client's context owns the process; when
// it ends, the node kills the process (and its children).
func TestExecCancelKillsOnNode(t *testing.T) {
	fake := nodetest.NewFake(t, nil)
	c, _ := serve(t, fake)
	ctx := ctxT(t)
	if err := c.Start(ctx, "sb", node.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ectx, cancel := context.WithCancel(ctx)
	p, err := c.Exec(ectx, "sb", []string{"sh", "-c", "echo $$; sleep 60"}, node.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := bufio.NewReader(p.Stdout()).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(l))
	if err != nil {
		t.Fatalf("pid line %q", l)
	}
	if fake.Busy("sb") != 1 {
		t.Fatalf("node holds the sandbox %d times during an exec, want 1", fake.Busy("sb"))
	}
	cancel()
	if _, err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want canceled", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still runs on the node 10s after the client cancelled", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "the node to release the sandbox", func() bool { return fake.Busy("sb") == 0 })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExecWaitError: a node whose Wait fails passes the error's kind on.
func TestExecWaitError(t *testing.T) {
	fake := nodetest.NewFake(t, nil)
	fake.ExecFunc = func(ctx context.Context, name string, argv []string, o node.ExecOptions) (node.Process, error) {
		return waitFails{nodetest.Done(-1, "partial")}, nil
	}
	c, _ := serve(t, fake)
	ctx := ctxT(t)
	c.Start(ctx, "sb", node.StartOptions{})
	p, err := c.Exec(ctx, "sb", []string{"x"}, node.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	if _, err := p.Wait(ctx); !errors.Is(err, errdefs.ErrUnavailable) || string(out) != "partial" {
		t.Fatalf("Wait = %v, output %q; want unavailable and \"partial\"", err, out)
	}
}

type waitFails struct{ node.Process }

func (w waitFails) Wait(ctx context.Context) (int, error) {
	w.Process.Wait(ctx)
	return -1, errdefs.Unavailable("sandbox agent went away")
}

// TestAgentTunnel: the agent protocol runs through the tunnel unchanged,
// streams, and holds the sandbox busy until release.
func TestAgentTunnel(t *testing.T) {
	if !agenttest.Available() {
		t.Skip("needs root: the fake's agents come from agenttest")
	}
	fake := nodetest.NewFake(t, newAgent)
	c, _ := serve(t, fake)
	ctx := ctxT(t)
	if err := c.Start(ctx, "sb", node.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ag, release, err := c.Agent(ctx, "sb")
	if err != nil {
		t.Fatal(err)
	}
	if fake.Busy("sb") < 1 {
		t.Fatal("an open tunnel does not hold the sandbox")
	}
	// A large file both ways.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	if err := ag.WriteFile(ctx, "big.bin", bytes.NewReader(big), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := ag.ReadFile(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes, want %d equal", len(got), len(big))
	}
	// Concurrent calls open more tunnels.
	errs := make(chan error, 4)
	for range 4 {
		go func() { _, err := ag.ListFiles(ctx, ".", false); errs <- err }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The agent's exec streams through the tunnel: the first line comes
	// while the command still runs.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, err := ag.Exec(ectx, api.ExecRequest{Argv: []string{"sh", "-c", "echo first; sleep 30"}}, pw, io.Discard)
		pw.CloseWithError(err)
		done <- err
	}()
	line := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(pr).ReadString('\n'); line <- l }()
	select {
	case l := <-line:
		if l != "first\n" {
			t.Fatalf("first line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's exec output is buffered by the tunnel")
	}
	go io.Copy(io.Discard, pr)

	// release closes every tunnel, the busy one too: none may linger in
	// the client's pool holding the sandbox awake.
	release()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an exec through a released agent succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("release left the running call's tunnel open")
	}
	waitFor(t, "the tunnels to close and the node to release the sandbox", func() bool { return fake.Busy("sb") == 0 })
	if _, err := ag.ListFiles(ctx, ".", false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("agent call after release = %v, want failed precondition", err)
	}
}

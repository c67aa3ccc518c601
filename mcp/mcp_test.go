package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

const testKey = "k-test"

// fakeBerth is a small stand-in for berth's HTTP API: just the routes the
// tools call, with the answers the real server gives (JSON errors with an
// errdefs code, exec as server-sent events).
type fakeBerth struct {
	mu      sync.Mutex
	creates []api.CreateSandboxRequest
	files   map[string][]byte
	modes   map[string]string
	execs   []api.ExecRequest
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.Error{Code: code, Message: msg})
}

func (f *fakeBerth) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/sandboxes/{name}", func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandboxRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.creates = append(f.creates, req)
		f.mu.Unlock()
		if req.Image == "nosuch" {
			writeErr(w, http.StatusNotFound, "not_found", `image "nosuch" not found`)
			return
		}
		status := http.StatusCreated
		if r.PathValue("name") == "old" {
			status = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(api.Sandbox{Name: r.PathValue("name"), State: "running", Image: "debian-trixie", Instance: "standard-1", Internet: req.Internet != nil && *req.Internet})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.SandboxList{Sandboxes: []api.Sandbox{{Name: "a", State: "running"}, {Name: "b", State: "sleeping"}}})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") == "ghost" {
			writeErr(w, http.StatusNotFound, "not_found", `sandbox "ghost" not found`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes/{name}/exec", func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecRequest
		json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.execs = append(f.execs, req)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		event := func(name string, ev api.ExecEvent) {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		}
		switch req.Command {
		case "big":
			chunk := []byte(strings.Repeat("x", 32<<10))
			for range 8 { // 256 KiB
				event("stdout", api.ExecEvent{Type: "stdout", Data: chunk})
			}
			event("exit", api.ExecEvent{Type: "exit", Exit: &api.ExitStatus{ExitCode: 0}})
		default:
			event("stdout", api.ExecEvent{Type: "stdout", Data: []byte("hi\n")})
			event("stderr", api.ExecEvent{Type: "stderr", Data: []byte("warn\n")})
			event("exit", api.ExecEvent{Type: "exit", Exit: &api.ExitStatus{ExitCode: 3, DurationMs: 5}})
		}
	})
	mux.HandleFunc("GET /v1/sandboxes/{name}/files/content", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.files[r.URL.Query().Get("path")]
		f.mu.Unlock()
		if !ok {
			writeErr(w, http.StatusNotFound, "not_found", r.URL.Query().Get("path")+": no such file")
			return
		}
		w.Write(b)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{name}/files/content", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.files[r.URL.Query().Get("path")] = b
		f.modes[r.URL.Query().Get("path")] = r.URL.Query().Get("mode")
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	// Every route needs the key, as the real API does.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			writeErr(w, http.StatusUnauthorized, "unauthenticated", "invalid API key")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func newFake(t *testing.T) (*fakeBerth, *httptest.Server) {
	f := &fakeBerth{files: map[string][]byte{}, modes: map[string]string{}}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	return f, srv
}

// connect serves NewServer(clients) over the SDK's in-memory transport
// and returns a client session on it.
func connect(t *testing.T, clients Clients) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := NewServer(clients).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its structured result decoded into out
// (when the call succeeded) and the result itself.
func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if !res.IsError && out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", name, b, err)
		}
	}
	return res
}

func errText(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %+v", res.StructuredContent)
	}
	if len(res.Content) != 1 {
		t.Fatalf("tool error with %d contents", len(res.Content))
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		t.Fatalf("tool error content is %T", res.Content[0])
	}
	return tc.Text
}

func TestListTools(t *testing.T) {
	_, srv := newFake(t)
	cs := connect(t, Static(client.New(srv.URL, testKey)))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		b, _ := json.Marshal(tool.InputSchema)
		if !strings.Contains(string(b), `"description"`) {
			t.Errorf("tool %s: input schema without property descriptions: %s", tool.Name, b)
		}
	}
	for _, want := range []string{"sandbox_create", "sandbox_list", "sandbox_destroy", "exec", "file_read", "file_write",
		"run_code", "process_start", "wait_for_port", "expose_port", "snapshot", "fork"} {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}
	// The exec schema requires sandbox and command, not the optional fields.
	for _, tool := range res.Tools {
		if tool.Name != "exec" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s struct{ Required []string }
		json.Unmarshal(b, &s)
		slices.Sort(s.Required)
		if !slices.Equal(s.Required, []string{"command", "sandbox"}) {
			t.Errorf("exec requires %v, want [command sandbox]", s.Required)
		}
	}
}

func TestSandboxTools(t *testing.T) {
	f, srv := newFake(t)
	cs := connect(t, Static(client.New(srv.URL, testKey)))

	var created CreateOutput
	if res := call(t, cs, "sandbox_create", map[string]any{"name": "new", "image": "python", "internet": true}, &created); res.IsError {
		t.Fatalf("sandbox_create: %s", errText(t, res))
	}
	if created.Name != "new" || !created.Created || !created.Internet || created.State != "running" {
		t.Errorf("sandbox_create = %+v", created)
	}
	if len(f.creates) != 1 || f.creates[0].Image != "python" || f.creates[0].Internet == nil || !*f.creates[0].Internet {
		t.Errorf("berth got %+v", f.creates)
	}
	if call(t, cs, "sandbox_create", map[string]any{"name": "old"}, &created); created.Created {
		t.Errorf("an existing sandbox was reported created: %+v", created)
	}

	var list ListOutput
	call(t, cs, "sandbox_list", map[string]any{}, &list)
	if len(list.Sandboxes) != 2 || list.Sandboxes[1].Name != "b" || list.Sandboxes[1].State != "sleeping" {
		t.Errorf("sandbox_list = %+v", list)
	}

	var destroyed DestroyOutput
	if res := call(t, cs, "sandbox_destroy", map[string]any{"name": "a"}, &destroyed); res.IsError || destroyed.Destroyed != "a" {
		t.Errorf("sandbox_destroy = %+v", res)
	}
}

// A berth error reaches the MCP client as a tool error (not a protocol
// error) with its errdefs code and berth's message.
func TestErrorsKeepTheirKind(t *testing.T) {
	_, srv := newFake(t)
	cs := connect(t, Static(client.New(srv.URL, testKey)))
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"sandbox_destroy", map[string]any{"name": "ghost"}, `not_found: sandbox "ghost" not found`},
		{"sandbox_create", map[string]any{"name": "x", "image": "nosuch"}, `not_found: image "nosuch" not found`},
		{"file_read", map[string]any{"sandbox": "x", "path": "/nope"}, "not_found: /nope: no such file"},
		{"file_write", map[string]any{"sandbox": "x", "path": "/f", "content": "a", "mode": "9"}, "invalid_argument: mode"},
		{"file_write", map[string]any{"sandbox": "x", "path": "/f", "content": "!!", "encoding": "base64"}, "invalid_argument: content is not valid base64"},
		{"exec", map[string]any{"sandbox": "x", "command": "true", "maxOutputBytes": MaxOutputBytes + 1}, "invalid_argument: maxOutputBytes"},
		{"wait_for_port", map[string]any{"sandbox": "x", "process": "p", "port": 0}, "invalid_argument: port"},
	} {
		got := errText(t, call(t, cs, tc.tool, tc.args, nil))
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s %v: error %q, want it to start with %q", tc.tool, tc.args, got, tc.want)
		}
	}
	// Input the schema refuses never reaches the handler, and is a tool error too.
	got := errText(t, call(t, cs, "exec", map[string]any{"sandbox": "x"}, nil))
	if !strings.Contains(got, "command") {
		t.Errorf("exec without command: %q", got)
	}

	// A wrong key is berth's unauthenticated error, not something made up here.
	cs = connect(t, Static(client.New(srv.URL, "wrong")))
	if got := errText(t, call(t, cs, "sandbox_list", nil, nil)); got != "unauthenticated: invalid API key" {
		t.Errorf("wrong key: %q", got)
	}
}

func TestExec(t *testing.T) {
	f, srv := newFake(t)
	cs := connect(t, Static(client.New(srv.URL, testKey)))

	var out ExecOutput
	if res := call(t, cs, "exec", map[string]any{"sandbox": "s", "command": "echo hi", "cwd": "/tmp"}, &out); res.IsError {
		t.Fatalf("exec: %s", errText(t, res))
	}
	// A non-zero exit is a result, not an error.
	if out.Stdout != "hi\n" || out.Stderr != "warn\n" || out.ExitCode != 3 || out.Truncated {
		t.Errorf("exec = %+v", out)
	}
	if got := f.execs[0]; got.Command != "echo hi" || got.Cwd != "/tmp" || got.TimeoutMs != DefaultExecTimeoutMs {
		t.Errorf("berth got %+v", got)
	}

	// Output is bounded: 256 KiB printed, 1000 bytes kept, the rest dropped and said so.
	call(t, cs, "exec", map[string]any{"sandbox": "s", "command": "big", "maxOutputBytes": 1000, "timeoutMs": 5}, &out)
	if len(out.Stdout) != 1000 || !out.Truncated || out.ExitCode != 0 {
		t.Errorf("big exec: %d bytes kept, truncated %v, exit %d", len(out.Stdout), out.Truncated, out.ExitCode)
	}
	if f.execs[1].TimeoutMs != 5 {
		t.Errorf("timeoutMs sent as %d", f.execs[1].TimeoutMs)
	}
	// The default bound applies when none is given.
	out = ExecOutput{}
	call(t, cs, "exec", map[string]any{"sandbox": "s", "command": "big"}, &out)
	if len(out.Stdout) != DefaultOutputBytes || !out.Truncated {
		t.Errorf("big exec with the default bound kept %d bytes", len(out.Stdout))
	}
}

func TestFiles(t *testing.T) {
	f, srv := newFake(t)
	cs := connect(t, Static(client.New(srv.URL, testKey)))

	var w WriteOutput
	if res := call(t, cs, "file_write", map[string]any{"sandbox": "s", "path": "/home/user/a.txt", "content": "héllo\n", "mode": "0755"}, &w); res.IsError {
		t.Fatalf("file_write: %s", errText(t, res))
	}
	if string(f.files["/home/user/a.txt"]) != "héllo\n" || f.modes["/home/user/a.txt"] != "0755" || w.Bytes != 7 {
		t.Errorf("berth got %q mode %q; tool said %+v", f.files["/home/user/a.txt"], f.modes["/home/user/a.txt"], w)
	}
	bin := []byte{0, 1, 2, 0xff}
	call(t, cs, "file_write", map[string]any{"sandbox": "s", "path": "/bin.dat", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}, &w)
	if string(f.files["/bin.dat"]) != string(bin) || f.modes["/bin.dat"] != "" {
		t.Errorf("base64 write: berth got %v mode %q", f.files["/bin.dat"], f.modes["/bin.dat"])
	}

	var r ReadOutput
	call(t, cs, "file_read", map[string]any{"sandbox": "s", "path": "/home/user/a.txt"}, &r)
	if r.Content != "héllo\n" || r.Encoding != "utf-8" || r.Truncated {
		t.Errorf("file_read text = %+v", r)
	}
	call(t, cs, "file_read", map[string]any{"sandbox": "s", "path": "/bin.dat"}, &r)
	if got, _ := base64.StdEncoding.DecodeString(r.Content); r.Encoding != "base64" || string(got) != string(bin) {
		t.Errorf("file_read binary = %+v", r)
	}
	// Bounded: a cut inside "é" (2 bytes) still gives text, without the half rune.
	call(t, cs, "file_read", map[string]any{"sandbox": "s", "path": "/home/user/a.txt", "maxBytes": 2}, &r)
	if r.Content != "h" || r.Encoding != "utf-8" || !r.Truncated || r.Bytes != 1 {
		t.Errorf("file_read bounded = %+v", r)
	}
	// A file of exactly maxBytes is whole.
	r = ReadOutput{}
	call(t, cs, "file_read", map[string]any{"sandbox": "s", "path": "/home/user/a.txt", "maxBytes": 7}, &r)
	if r.Content != "héllo\n" || r.Truncated {
		t.Errorf("file_read exact = %+v", r)
	}
}

func TestCappedWriter(t *testing.T) {
	w := &capped{n: 5}
	for _, s := range []string{"abc", "defg", "h"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if w.text() != "abcde" || w.dropped != 3 {
		t.Errorf("kept %q, dropped %d", w.text(), w.dropped)
	}
}

// bearerTransport adds a bearer token to every request, as an MCP client
// configured with a header does.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// Over streamable HTTP the server holds no key: a request without a bearer
// token is refused, and each tool call goes to berth with the caller's key.
func TestHTTPUsesTheCallersKey(t *testing.T) {
	f, berth := newFake(t)
	srv := httptest.NewServer(HTTPHandler(berth.URL))
	t.Cleanup(srv.Close)

	res, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("no bearer token: status %d, want 401", res.StatusCode)
	}

	dial := func(key string) *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(context.Background(), &sdk.StreamableClientTransport{
			Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearerTransport{key}}, DisableStandaloneSSE: true,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	var out ExecOutput
	if res := call(t, dial(testKey), "exec", map[string]any{"sandbox": "s", "command": "echo hi"}, &out); res.IsError || out.Stdout != "hi\n" {
		t.Errorf("exec with the right key: %+v %+v", res, out)
	}
	if len(f.execs) != 1 {
		t.Errorf("berth saw %d execs", len(f.execs))
	}
	// Control: another key reaches berth as itself and berth refuses it.
	if got := errText(t, call(t, dial("someone-else"), "exec", map[string]any{"sandbox": "s", "command": "echo hi"}, nil)); got != "unauthenticated: invalid API key" {
		t.Errorf("exec with another key: %q", got)
	}
	if len(f.execs) != 1 {
		t.Errorf("a refused key still ran a command: %d execs", len(f.execs))
	}
}

func TestBearerWithoutToken(t *testing.T) {
	_, err := Bearer("http://127.0.0.1:1")(context.Background(), &sdk.CallToolRequest{})
	if err == nil || !strings.Contains(err.Error(), "Authorization: Bearer") {
		t.Errorf("Bearer without a token: %v", err)
	}
}

package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// Bounds on what one tool call returns to the model. Output past them is
// dropped (and said so), never buffered without limit: a command that
// prints a gigabyte must not become a gigabyte-long MCP message.
const (
	// DefaultOutputBytes and MaxOutputBytes bound each of exec's stdout
	// and stderr, and run_code's logs.
	DefaultOutputBytes = 64 << 10
	MaxOutputBytes     = 1 << 20
	// DefaultReadBytes and MaxReadBytes bound file_read.
	DefaultReadBytes = 256 << 10
	MaxReadBytes     = 4 << 20
	// DefaultExecTimeoutMs is exec's and run_code's timeout when the call
	// sets none: MCP clients give up on a call after a minute or so by
	// default, and a command still running then would be orphaned.
	DefaultExecTimeoutMs = 60_000
)

type tools struct{ clients Clients }

func ptr[T any](v T) *T { return &v }

func (t *tools) register(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{
		Name: "sandbox_create",
		Description: "Get or create a sandbox by name: returns the sandbox of that name if it exists (waking it if it sleeps), " +
			"else creates it. image, instance and internet apply when it (re)starts. Call this before using a sandbox.",
		Annotations: &sdk.ToolAnnotations{Title: "Create or get a sandbox", IdempotentHint: true, DestructiveHint: ptr(false)},
	}, t.sandboxCreate)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "sandbox_list",
		Description: "List the sandboxes this API key can see, with their state (running, sleeping, failed, ...).",
		Annotations: &sdk.ToolAnnotations{Title: "List sandboxes", ReadOnlyHint: true},
	}, t.sandboxList)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "sandbox_destroy",
		Description: "Destroy a sandbox and all its files. This cannot be undone.",
		Annotations: &sdk.ToolAnnotations{Title: "Destroy a sandbox", DestructiveHint: ptr(true), IdempotentHint: true},
	}, t.sandboxDestroy)
	sdk.AddTool(s, &sdk.Tool{
		Name: "exec",
		Description: "Run a shell command (/bin/sh -c) in a sandbox and return its stdout, stderr and exit code. " +
			"A non-zero exit code is a result, not an error. Output beyond maxOutputBytes per stream is dropped (truncated is set). " +
			"The command is killed after timeoutMs (default 60000).",
		Annotations: &sdk.ToolAnnotations{Title: "Run a command", DestructiveHint: ptr(true)},
	}, t.exec)
	sdk.AddTool(s, &sdk.Tool{
		Name: "file_read",
		Description: "Read a file from a sandbox. Returns UTF-8 text as is, anything else base64-encoded (encoding says which). " +
			"At most maxBytes are returned (truncated is set when the file is longer).",
		Annotations: &sdk.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true},
	}, t.fileRead)
	sdk.AddTool(s, &sdk.Tool{
		Name: "file_write",
		Description: "Write a file in a sandbox, creating it (and its missing parent directories) or replacing its content. " +
			"content is text, or base64 with encoding \"base64\".",
		Annotations: &sdk.ToolAnnotations{Title: "Write a file", DestructiveHint: ptr(true), IdempotentHint: true},
	}, t.fileWrite)
	sdk.AddTool(s, &sdk.Tool{
		Name: "run_code",
		Description: "Run code in a persistent interpreter in a sandbox (python by default; javascript, typescript, bash): " +
			"variables and imports persist across calls in the same context. Returns stdout, stderr, the results " +
			"(the last expression's value as text) and the exception if one was raised.",
		Annotations: &sdk.ToolAnnotations{Title: "Run code", DestructiveHint: ptr(true)},
	}, t.runCode)
	sdk.AddTool(s, &sdk.Tool{
		Name: "process_start",
		Description: "Start a background process (a dev server, a watcher) in a sandbox with /bin/sh -c and return its id at once. " +
			"Use wait_for_port to wait until it listens.",
		Annotations: &sdk.ToolAnnotations{Title: "Start a background process", DestructiveHint: ptr(true)},
	}, t.processStart)
	sdk.AddTool(s, &sdk.Tool{
		Name: "wait_for_port",
		Description: "Wait until a port inside the sandbox accepts TCP connections (mode tcp) or answers HTTP GET path " +
			"with a 2xx/3xx status (mode http, the default). Fails if the process ends first or after timeoutMs (default 60000).",
		Annotations: &sdk.ToolAnnotations{Title: "Wait for a port", ReadOnlyHint: true},
	}, t.waitForPort)
	sdk.AddTool(s, &sdk.Tool{
		Name: "expose_port",
		Description: "Give a port inside the sandbox a preview URL that reaches it over HTTP from outside. " +
			"The service may listen on 127.0.0.1. A private URL needs the API key as a bearer token.",
		Annotations: &sdk.ToolAnnotations{Title: "Expose a port", IdempotentHint: true, DestructiveHint: ptr(false)},
	}, t.exposePort)
	sdk.AddTool(s, &sdk.Tool{
		Name: "snapshot",
		Description: "Take a snapshot of a sandbox's files (its processes keep running). Start a new sandbox from it with " +
			"sandbox_create's snapshot argument.",
		Annotations: &sdk.ToolAnnotations{Title: "Snapshot a sandbox", DestructiveHint: ptr(false)},
	}, t.snapshot)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "fork",
		Description: "Make count new sandboxes from one fresh snapshot of a sandbox: each starts with a copy of its files.",
		Annotations: &sdk.ToolAnnotations{Title: "Fork a sandbox", DestructiveHint: ptr(false)},
	}, t.fork)
}

func (t *tools) client(ctx context.Context, req *sdk.CallToolRequest) (*client.Client, error) {
	c, err := t.clients(ctx, req)
	if err != nil {
		return nil, toolError(err)
	}
	return c, nil
}

// Sandbox is a sandbox as the tools return it: what an agent needs, not
// every field of api.Sandbox.
type Sandbox struct {
	Name     string `json:"name"`
	State    string `json:"state" jsonschema:"running, sleeping, starting, failed, ..."`
	Image    string `json:"image"`
	Instance string `json:"instance"`
	Internet bool   `json:"internet"`
	Error    string `json:"error,omitempty" jsonschema:"why it failed, when state is failed"`
}

func sandboxOf(sb api.Sandbox) Sandbox {
	return Sandbox{Name: sb.Name, State: sb.State, Image: sb.Image, Instance: sb.Instance, Internet: sb.Internet, Error: sb.Error}
}

type CreateInput struct {
	Name     string `json:"name" jsonschema:"the sandbox's name: lower-case letters, digits and dashes"`
	Image    string `json:"image,omitempty" jsonschema:"image name, reference or sha256 digest (default debian-trixie)"`
	Instance string `json:"instance,omitempty" jsonschema:"size: lite, basic, standard-1 (default) .. standard-4"`
	Internet *bool  `json:"internet,omitempty" jsonschema:"allow outbound internet access (default false)"`
	Snapshot string `json:"snapshot,omitempty" jsonschema:"a snapshot id to start a new sandbox from (ignored for an existing sandbox)"`
}

type CreateOutput struct {
	Sandbox
	Created bool `json:"created" jsonschema:"true if this call created the sandbox, false if it existed"`
}

func (t *tools) sandboxCreate(ctx context.Context, req *sdk.CallToolRequest, in CreateInput) (*sdk.CallToolResult, CreateOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, CreateOutput{}, err
	}
	if in.Name == "" {
		return nil, CreateOutput{}, invalid("name is required")
	}
	sb, created, err := c.GetOrCreate(ctx, api.CreateSandboxRequest{
		Name: in.Name, Image: in.Image, Instance: in.Instance, Internet: in.Internet, Snapshot: in.Snapshot,
	})
	if err != nil {
		return nil, CreateOutput{}, toolError(err)
	}
	return nil, CreateOutput{Sandbox: sandboxOf(sb), Created: created}, nil
}

type ListInput struct {
	State string `json:"state,omitempty" jsonschema:"only sandboxes in this state (running, sleeping, failed, ...)"`
}

type ListOutput struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (t *tools) sandboxList(ctx context.Context, req *sdk.CallToolRequest, in ListInput) (*sdk.CallToolResult, ListOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, ListOutput{}, err
	}
	list, err := c.List(ctx, in.State, nil)
	if err != nil {
		return nil, ListOutput{}, toolError(err)
	}
	out := ListOutput{Sandboxes: make([]Sandbox, 0, len(list))}
	for _, sb := range list {
		out.Sandboxes = append(out.Sandboxes, sandboxOf(sb))
	}
	return nil, out, nil
}

type NameInput struct {
	Name string `json:"name" jsonschema:"the sandbox's name"`
}

type DestroyOutput struct {
	Destroyed string `json:"destroyed" jsonschema:"the name of the sandbox destroyed"`
}

func (t *tools) sandboxDestroy(ctx context.Context, req *sdk.CallToolRequest, in NameInput) (*sdk.CallToolResult, DestroyOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, DestroyOutput{}, err
	}
	if in.Name == "" {
		return nil, DestroyOutput{}, invalid("name is required")
	}
	if err := c.Destroy(ctx, in.Name); err != nil {
		return nil, DestroyOutput{}, toolError(err)
	}
	return nil, DestroyOutput{Destroyed: in.Name}, nil
}

type ExecInput struct {
	Sandbox        string `json:"sandbox" jsonschema:"the sandbox's name"`
	Command        string `json:"command" jsonschema:"the command, run with /bin/sh -c"`
	Cwd            string `json:"cwd,omitempty" jsonschema:"working directory (default: the user's home, /home/user)"`
	User           string `json:"user,omitempty" jsonschema:"run as this user (default user; root on request)"`
	TimeoutMs      int64  `json:"timeoutMs,omitempty" jsonschema:"kill the command after this many milliseconds (default 60000)"`
	MaxOutputBytes int    `json:"maxOutputBytes,omitempty" jsonschema:"keep at most this many bytes of stdout and of stderr each (default 65536, at most 1048576)"`
}

type ExecOutput struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exitCode" jsonschema:"the command's exit code; 128+n when killed by signal n"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty" jsonschema:"true if the command was killed at timeoutMs"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"true if output beyond maxOutputBytes was dropped"`
	DurationMs int64  `json:"durationMs"`
}

// capped keeps the first n bytes written and counts the rest, so that a
// command keeps running (and its exit code is known) however much it prints.
type capped struct {
	buf     bytes.Buffer
	n       int
	dropped int64
}

func (w *capped) Write(p []byte) (int, error) {
	if room := w.n - w.buf.Len(); room > 0 {
		k := min(room, len(p))
		w.buf.Write(p[:k])
		w.dropped += int64(len(p) - k)
	} else {
		w.dropped += int64(len(p))
	}
	return len(p), nil
}

// text is the kept output as valid UTF-8 (a cut may split a rune; invalid
// bytes become U+FFFD so the JSON stays text).
func (w *capped) text() string { return strings.ToValidUTF8(w.buf.String(), "\uFFFD") }

func outputBound(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultOutputBytes, nil
	case n < 0 || n > MaxOutputBytes:
		return 0, invalid("maxOutputBytes must be between 1 and %d", MaxOutputBytes)
	}
	return n, nil
}

func timeoutMs(ms int64) (int64, error) {
	switch {
	case ms == 0:
		return DefaultExecTimeoutMs, nil
	case ms < 0:
		return 0, invalid("timeoutMs must not be negative")
	}
	return ms, nil
}

func (t *tools) exec(ctx context.Context, req *sdk.CallToolRequest, in ExecInput) (*sdk.CallToolResult, ExecOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if in.Sandbox == "" || in.Command == "" {
		return nil, ExecOutput{}, invalid("sandbox and command are required")
	}
	n, err := outputBound(in.MaxOutputBytes)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	ms, err := timeoutMs(in.TimeoutMs)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	stdout, stderr := &capped{n: n}, &capped{n: n}
	st, err := c.ExecStream(ctx, in.Sandbox, api.ExecRequest{
		Command: in.Command, Cwd: in.Cwd, User: in.User, TimeoutMs: ms,
	}, stdout, stderr)
	if err != nil {
		return nil, ExecOutput{}, toolError(err)
	}
	return nil, ExecOutput{
		Stdout: stdout.text(), Stderr: stderr.text(),
		ExitCode: st.ExitCode, Signal: st.Signal, TimedOut: st.TimedOut,
		Truncated:  stdout.dropped > 0 || stderr.dropped > 0,
		DurationMs: st.DurationMs,
	}, nil
}

type ReadInput struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox's name"`
	Path     string `json:"path" jsonschema:"the file's path; relative paths are under /home/user"`
	MaxBytes int    `json:"maxBytes,omitempty" jsonschema:"return at most this many bytes (default 262144, at most 4194304)"`
}

type ReadOutput struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"utf-8 (content is the text) or base64 (the file is not UTF-8 text)"`
	Bytes     int    `json:"bytes" jsonschema:"how many bytes of the file content holds"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"true if the file is longer than maxBytes"`
}

func (t *tools) fileRead(ctx context.Context, req *sdk.CallToolRequest, in ReadInput) (*sdk.CallToolResult, ReadOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, ReadOutput{}, err
	}
	if in.Sandbox == "" || in.Path == "" {
		return nil, ReadOutput{}, invalid("sandbox and path are required")
	}
	n := in.MaxBytes
	switch {
	case n == 0:
		n = DefaultReadBytes
	case n < 0 || n > MaxReadBytes:
		return nil, ReadOutput{}, invalid("maxBytes must be between 1 and %d", MaxReadBytes)
	}
	rc, err := c.ReadFile(ctx, in.Sandbox, in.Path)
	if err != nil {
		return nil, ReadOutput{}, toolError(err)
	}
	defer rc.Close()
	// One byte more than asked tells a file of exactly n bytes from a longer one.
	b, err := io.ReadAll(io.LimitReader(rc, int64(n)+1))
	if err != nil {
		return nil, ReadOutput{}, toolError(err)
	}
	out := ReadOutput{Path: in.Path}
	if len(b) > n {
		b, out.Truncated = b[:n], true
	}
	out.Bytes = len(b)
	text := b
	if out.Truncated {
		// A cut inside a multi-byte rune is still text.
		for i := 0; i < utf8.UTFMax-1 && len(text) > 0 && !utf8.Valid(text); i++ {
			text = text[:len(text)-1]
		}
	}
	if utf8.Valid(text) && !bytes.ContainsRune(text, 0) {
		out.Content, out.Encoding, out.Bytes = string(text), "utf-8", len(text)
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(b), "base64"
	}
	return nil, out, nil
}

type WriteInput struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox's name"`
	Path     string `json:"path" jsonschema:"the file's path; relative paths are under /home/user"`
	Content  string `json:"content" jsonschema:"the file's new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default: content is the text) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"permission bits in octal, like 0755 (default: 0644 for a new file, unchanged for an existing one)"`
}

type WriteOutput struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes" jsonschema:"how many bytes were written"`
}

func (t *tools) fileWrite(ctx context.Context, req *sdk.CallToolRequest, in WriteInput) (*sdk.CallToolResult, WriteOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, WriteOutput{}, err
	}
	if in.Sandbox == "" || in.Path == "" {
		return nil, WriteOutput{}, invalid("sandbox and path are required")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteOutput{}, invalid("content is not valid base64: %v", err)
		}
	default:
		return nil, WriteOutput{}, invalid("encoding %q: use utf-8 or base64", in.Encoding)
	}
	var mode uint64
	if in.Mode != "" {
		if mode, err = strconv.ParseUint(in.Mode, 8, 32); err != nil || mode > 0o7777 || mode == 0 {
			return nil, WriteOutput{}, invalid("mode %q: give permission bits in octal, like 0644 or 0755", in.Mode)
		}
	}
	if err := c.WriteFile(ctx, in.Sandbox, in.Path, bytes.NewReader(data), uint32(mode)); err != nil {
		return nil, WriteOutput{}, toolError(err)
	}
	return nil, WriteOutput{Path: in.Path, Bytes: len(data)}, nil
}

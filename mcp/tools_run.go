package mcp

import (
	"context"
	"io"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/api"
)

// The tools that run and keep things in a sandbox beyond one command:
// code contexts, background processes and their ports, previews,
// snapshots and forks. Sandboxes, exec and files are in tools.go.

type RunCodeInput struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox's name"`
	Code      string `json:"code" jsonschema:"the code to run"`
	Language  string `json:"language,omitempty" jsonschema:"python (default), javascript, typescript or bash; picks the language's default context"`
	Context   string `json:"context,omitempty" jsonschema:"a code context id, instead of language's default context"`
	TimeoutMs int64  `json:"timeoutMs,omitempty" jsonschema:"interrupt the code after this many milliseconds (default 60000)"`
}

type RunCodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

type RunCodeOutput struct {
	Stdout         string        `json:"stdout"`
	Stderr         string        `json:"stderr"`
	Results        []string      `json:"results" jsonschema:"the text form of each result (the last expression's value, display() calls)"`
	Error          *RunCodeError `json:"error,omitempty" jsonschema:"the exception the code raised, if any"`
	ExecutionCount int           `json:"executionCount"`
	Context        string        `json:"context" jsonschema:"the context the code ran in"`
	Truncated      bool          `json:"truncated,omitempty"`
}

func (t *tools) runCode(ctx context.Context, req *sdk.CallToolRequest, in RunCodeInput) (*sdk.CallToolResult, RunCodeOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	if in.Sandbox == "" || in.Code == "" {
		return nil, RunCodeOutput{}, invalid("sandbox and code are required")
	}
	ms, err := timeoutMs(in.TimeoutMs)
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	res, err := c.RunCode(ctx, in.Sandbox, api.RunCodeRequest{Code: in.Code, Language: in.Language, Context: in.Context, TimeoutMs: ms}, nil)
	if err != nil {
		return nil, RunCodeOutput{}, toolError(err)
	}
	stdout, stderr := &capped{n: DefaultOutputBytes}, &capped{n: DefaultOutputBytes}
	for _, s := range res.Logs.Stdout {
		io.WriteString(stdout, s)
	}
	for _, s := range res.Logs.Stderr {
		io.WriteString(stderr, s)
	}
	out := RunCodeOutput{
		Stdout: stdout.text(), Stderr: stderr.text(), Results: []string{},
		ExecutionCount: res.ExecutionCount, Context: res.Context,
		Truncated: stdout.dropped > 0 || stderr.dropped > 0,
	}
	for _, r := range res.Results {
		text := r.Text
		if text == "" {
			text = r.Markdown
		}
		if len(text) > DefaultOutputBytes {
			text, out.Truncated = strings.ToValidUTF8(text[:DefaultOutputBytes], "\uFFFD"), true
		}
		out.Results = append(out.Results, text)
	}
	if e := res.Error; e != nil {
		out.Error = &RunCodeError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
		if len(out.Error.Traceback) > DefaultOutputBytes {
			out.Error.Traceback = strings.ToValidUTF8(out.Error.Traceback[:DefaultOutputBytes], "\uFFFD")
		}
	}
	return nil, out, nil
}

type ProcessStartInput struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox's name"`
	Command   string `json:"command" jsonschema:"the command, run with /bin/sh -c"`
	ID        string `json:"id,omitempty" jsonschema:"the process id to use (default: generated)"`
	Cwd       string `json:"cwd,omitempty" jsonschema:"working directory (default /home/user)"`
	User      string `json:"user,omitempty" jsonschema:"run as this user (default user)"`
	TimeoutMs int64  `json:"timeoutMs,omitempty" jsonschema:"kill it after this many milliseconds (default: never)"`
}

type Process struct {
	ID       string `json:"id"`
	PID      int    `json:"pid"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exitCode,omitempty"`
}

func (t *tools) processStart(ctx context.Context, req *sdk.CallToolRequest, in ProcessStartInput) (*sdk.CallToolResult, Process, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, Process{}, err
	}
	if in.Sandbox == "" || in.Command == "" {
		return nil, Process{}, invalid("sandbox and command are required")
	}
	if in.TimeoutMs < 0 {
		return nil, Process{}, invalid("timeoutMs must not be negative")
	}
	p, err := c.StartProcess(ctx, in.Sandbox, api.StartProcessRequest{
		Command: in.Command, ID: in.ID, Cwd: in.Cwd, User: in.User, TimeoutMs: in.TimeoutMs,
	})
	if err != nil {
		return nil, Process{}, toolError(err)
	}
	return nil, Process{ID: p.ID, PID: p.PID, Status: p.Status, ExitCode: p.ExitCode}, nil
}

type WaitPortInput struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox's name"`
	Process   string `json:"process" jsonschema:"the id of the process (from process_start) expected to listen; the wait fails if it ends"`
	Port      int    `json:"port" jsonschema:"the TCP port inside the sandbox"`
	Mode      string `json:"mode,omitempty" jsonschema:"http (default: GET path answers 2xx or 3xx) or tcp (a connection is accepted)"`
	Path      string `json:"path,omitempty" jsonschema:"the HTTP path to probe (default /)"`
	TimeoutMs int64  `json:"timeoutMs,omitempty" jsonschema:"give up after this many milliseconds (default 60000)"`
}

type WaitPortOutput struct {
	Ready      bool `json:"ready"`
	StatusCode int  `json:"statusCode,omitempty" jsonschema:"the HTTP status seen, in http mode"`
}

func (t *tools) waitForPort(ctx context.Context, req *sdk.CallToolRequest, in WaitPortInput) (*sdk.CallToolResult, WaitPortOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, WaitPortOutput{}, err
	}
	if in.Sandbox == "" || in.Process == "" {
		return nil, WaitPortOutput{}, invalid("sandbox and process are required")
	}
	if in.Port < 1 || in.Port > 65535 {
		return nil, WaitPortOutput{}, invalid("port must be between 1 and 65535")
	}
	ms, err := timeoutMs(in.TimeoutMs)
	if err != nil {
		return nil, WaitPortOutput{}, err
	}
	res, err := c.WaitForPort(ctx, in.Sandbox, in.Process, api.WaitPortRequest{Port: in.Port, Mode: in.Mode, Path: in.Path, TimeoutMs: ms})
	if err != nil {
		return nil, WaitPortOutput{}, toolError(err)
	}
	return nil, WaitPortOutput{Ready: true, StatusCode: res.StatusCode}, nil
}

type ExposeInput struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name"`
	Port    int    `json:"port" jsonschema:"the TCP port inside the sandbox"`
	Private bool   `json:"private,omitempty" jsonschema:"require the API key as a bearer token to use the URL"`
}

type ExposeOutput struct {
	Port    int    `json:"port"`
	URL     string `json:"url" jsonschema:"the preview URL (host-routed; needs wildcard DNS)"`
	PathURL string `json:"pathUrl" jsonschema:"the same service under a path, for clients without wildcard DNS"`
	Private bool   `json:"private"`
}

func (t *tools) exposePort(ctx context.Context, req *sdk.CallToolRequest, in ExposeInput) (*sdk.CallToolResult, ExposeOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, ExposeOutput{}, err
	}
	if in.Sandbox == "" {
		return nil, ExposeOutput{}, invalid("sandbox is required")
	}
	p, err := c.ExposePort(ctx, in.Sandbox, api.ExposePortRequest{Port: in.Port, Private: in.Private})
	if err != nil {
		return nil, ExposeOutput{}, toolError(err)
	}
	return nil, ExposeOutput{Port: p.Port, URL: p.URL, PathURL: p.PathURL, Private: p.Private}, nil
}

type SnapshotInput struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name"`
	Name    string `json:"name,omitempty" jsonschema:"a name for the snapshot"`
}

type SnapshotOutput struct {
	ID        string    `json:"id" jsonschema:"the snapshot id, for sandbox_create's snapshot argument"`
	Name      string    `json:"name,omitempty"`
	Sandbox   string    `json:"sandbox"`
	SizeBytes int64     `json:"sizeBytes"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (t *tools) snapshot(ctx context.Context, req *sdk.CallToolRequest, in SnapshotInput) (*sdk.CallToolResult, SnapshotOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	if in.Sandbox == "" {
		return nil, SnapshotOutput{}, invalid("sandbox is required")
	}
	s, err := c.Snapshot(ctx, in.Sandbox, api.SnapshotRequest{Name: in.Name})
	if err != nil {
		return nil, SnapshotOutput{}, toolError(err)
	}
	return nil, SnapshotOutput{ID: s.ID, Name: s.Name, Sandbox: s.Sandbox, SizeBytes: s.SizeBytes, ExpiresAt: s.ExpiresAt}, nil
}

type ForkInput struct {
	Sandbox string   `json:"sandbox" jsonschema:"the sandbox to fork"`
	Count   int      `json:"count,omitempty" jsonschema:"how many new sandboxes (default 1)"`
	Names   []string `json:"names,omitempty" jsonschema:"their names (count entries; default <sandbox>-fork-<n>)"`
}

type ForkOutput struct {
	Snapshot  string    `json:"snapshot" jsonschema:"the snapshot the new sandboxes share"`
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (t *tools) fork(ctx context.Context, req *sdk.CallToolRequest, in ForkInput) (*sdk.CallToolResult, ForkOutput, error) {
	c, err := t.client(ctx, req)
	if err != nil {
		return nil, ForkOutput{}, err
	}
	if in.Sandbox == "" {
		return nil, ForkOutput{}, invalid("sandbox is required")
	}
	count := in.Count
	if count == 0 {
		count = max(1, len(in.Names))
	}
	res, err := c.Fork(ctx, in.Sandbox, api.ForkRequest{Count: count, Names: in.Names})
	if err != nil {
		return nil, ForkOutput{}, toolError(err)
	}
	out := ForkOutput{Snapshot: res.Snapshot.ID, Sandboxes: make([]Sandbox, 0, len(res.Sandboxes))}
	for _, sb := range res.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, sandboxOf(sb))
	}
	return nil, out, nil
}

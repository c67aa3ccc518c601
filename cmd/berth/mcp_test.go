package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestMCPHelpTeaches(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"mcp", "--help"}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("berth mcp --help exited %d", code)
	}
	for _, want := range []string{"sandbox_create", "file_read", "wait_for_port", `"mcpServers"`, "BERTH_API_KEY", "--http", "Authorization: Bearer"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("berth mcp --help does not mention %s", want)
		}
	}
}

func TestMCPListenAddr(t *testing.T) {
	for in, want := range map[string]string{":8090": "127.0.0.1:8090", "0.0.0.0:8090": "0.0.0.0:8090", "[::1]:1": "[::1]:1"} {
		if got, err := mcpListenAddr(in); err != nil || got != want {
			t.Errorf("mcpListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := mcpListenAddr("8090"); err == nil {
		t.Error("mcpListenAddr(\"8090\") accepted a bare port without a colon")
	}
}

// berth mcp speaks MCP on its stdin and stdout: an SDK client on the other
// ends of the pipes lists its tools.
func TestMCPStdio(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"mcp", "--url", "http://127.0.0.1:1", "--api-key", "k"}, inR, outW, io.Discard)
		outW.Close()
	}()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test"}, nil).Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "exec") || !slices.Contains(names, "sandbox_create") {
		t.Errorf("tools over stdio: %v", names)
	}
	// The berth URL goes nowhere: the call fails as a tool error naming unavailability, not a hang or a crash.
	call, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "sandbox_list", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !call.IsError {
		t.Errorf("sandbox_list against no server succeeded: %+v", call)
	} else if text := call.Content[0].(*sdk.TextContent).Text; !strings.HasPrefix(text, "unavailable: ") {
		t.Errorf("sandbox_list against no server: %q", text)
	}
	cs.Close()
	if code := <-done; code != 0 {
		t.Errorf("berth mcp exited %d after the client closed", code)
	}
}

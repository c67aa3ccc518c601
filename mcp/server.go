package mcp

import (
	"context"
	"fmt"
	"runtime/debug"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Clients picks the berth client that serves one tool call. An error is
// returned to the MCP client as the tool's error.
type Clients func(ctx context.Context, req *sdk.CallToolRequest) (*client.Client, error)

// Static serves every call with c (stdio: one user, the key `berth mcp`
// was configured with).
func Static(c *client.Client) Clients {
	return func(context.Context, *sdk.CallToolRequest) (*client.Client, error) { return c, nil }
}

// Instructions is what the server tells an MCP client about itself at
// initialization; clients pass it to the model.
const Instructions = `berth runs named, isolated Linux sandboxes (Debian, user "user" with sudo, no internet unless asked for).
Call sandbox_create with a name first (it returns the existing sandbox of that name, waking it if it sleeps), then exec, file_read, file_write, run_code in it by that name.
A sleeping sandbox wakes on the next call with its files intact. For a dev server: process_start, wait_for_port, expose_port.
Destroy sandboxes you no longer need with sandbox_destroy. Errors read "<kind>: <message>" (not_found, invalid_argument, unauthenticated, ...).`

// NewServer returns the MCP server with berth's tools, each calling berth
// through the client clients picks for the call.
func NewServer(clients Clients) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "berth", Title: "berth sandboxes", Version: version()},
		&sdk.ServerOptions{Instructions: Instructions})
	t := &tools{clients: clients}
	t.register(s)
	return s
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}

// toolError is how a berth error reaches the MCP client: the errdefs code
// first, then berth's own message, so the kind survives the text-only
// channel of a tool error.
func toolError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s", errdefs.Code(err), err.Error())
}

// invalid is a tool error for bad input caught here, before berth.
func invalid(format string, args ...any) error {
	return toolError(errdefs.InvalidArgument(format, args...))
}

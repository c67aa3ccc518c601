package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/mcp"
)

func (a *app) mcpCmd() *cobra.Command {
	var httpAddr string
	cmd := &cobra.Command{
		Use:   "mcp [--http ADDR]",
		Short: "Serve berth's sandboxes as tools to AI agents (Model Context Protocol)",
		Long: `Serve berth as a Model Context Protocol (MCP) server, so that an agent (Claude
Desktop, Claude Code, Cursor, any MCP client) can create sandboxes and work
in them. Every tool call is a call of berth's API with your API key: the
agent can do exactly what the key can, in the key's tenant, and no more.

Tools:
  sandbox_create   get or create a sandbox by name (image, instance, internet, snapshot)
  sandbox_list     the sandboxes the key can see, with their state
  sandbox_destroy  destroy a sandbox and its files
  exec             run a shell command: stdout, stderr, exitCode (64 KiB per
                   stream by default, at most 1 MiB; timeout 60 s by default)
  file_read        read a file: UTF-8 text, else base64 (256 KiB by default, at most 4 MiB)
  file_write       write a file (text or base64; mode in octal)
  run_code         run python/javascript/typescript/bash in a persistent interpreter
  process_start    start a background process (a dev server)
  wait_for_port    wait until a port in the sandbox answers (http or tcp)
  expose_port      give a port a preview URL
  snapshot         snapshot a sandbox's files
  fork             new sandboxes from a fresh snapshot of one
A berth error comes back as a tool error reading "<kind>: <message>"
(not_found, invalid_argument, unauthenticated, permission_denied, ...).

Over stdio (the default) the MCP client starts this command and talks to it
on stdin/stdout; logs go to stderr. It finds berth like every other command:
--url/--api-key, else BERTH_URL/BERTH_API_KEY, else <data>/client.json.
A client configuration (Claude Desktop's claude_desktop_config.json, Cursor's
mcp.json, and most others take this shape):

  {
    "mcpServers": {
      "berth": {
        "command": "/usr/local/bin/berth",
        "args": ["mcp"],
        "env": {
          "BERTH_URL": "http://127.0.0.1:7070",
          "BERTH_API_KEY": "<your API key>"
        }
      }
    }
  }

With Claude Code:
  claude mcp add berth --env BERTH_URL=http://127.0.0.1:7070 \
    --env BERTH_API_KEY=<key> -- berth mcp

With --http ADDR it serves MCP's streamable HTTP transport at
http://ADDR/mcp instead, for clients that connect to a URL. It holds no key
of its own there: every request must carry "Authorization: Bearer <berth
API key>" (401 without one), and each tool call goes to berth with the key
of the request, so one server can serve several tenants, each with its own
key, and a session opened with one key refuses requests with another. The
key travels in the clear on plain HTTP: keep ADDR on loopback (the default
if you give only a port, ":8090" -> 127.0.0.1:8090), or put TLS in front.
Requests to a loopback address must name a loopback Host (DNS rebinding
protection). Only the berth URL is read from --url, BERTH_URL or
<data>/client.json.

  berth mcp --http 127.0.0.1:8090
  {"mcpServers": {"berth": {"url": "http://127.0.0.1:8090/mcp",
      "headers": {"Authorization": "Bearer <your API key>"}}}}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if httpAddr != "" {
				return a.serveMCPHTTP(cmd.Context(), httpAddr)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s := mcp.NewServer(mcp.Static(c))
			err = s.Run(cmd.Context(), &sdk.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}})
			if err != nil && cmd.Context().Err() != nil {
				return nil // interrupted: a normal end for a stdio server
			}
			return err
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on ADDR (host:port; a bare :port binds 127.0.0.1) instead of stdio")
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mcpBaseURL is berth's URL for `berth mcp --http`: the key comes with
// each request, so only the URL is configured.
func (a *app) mcpBaseURL() (string, error) {
	if a.url != "" {
		return a.url, nil
	}
	if u := os.Getenv(client.EnvURL); u != "" {
		return u, nil
	}
	cfg, err := client.LoadConfig(a.dataDir)
	if err != nil {
		return "", err
	}
	if cfg.URL == "" {
		return "", fmt.Errorf("%s has no url: set --url or %s", client.ConfigPath(a.dataDir), client.EnvURL)
	}
	return cfg.URL, nil
}

// mcpListenAddr puts a bare ":port" on loopback: the bearer key travels in
// the clear, so listening on every interface must be asked for by name
// ("0.0.0.0:8090").
func mcpListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--http %q: want host:port: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

func (a *app) serveMCPHTTP(ctx context.Context, addr string) error {
	base, err := a.mcpBaseURL()
	if err != nil {
		return err
	}
	addr, err = mcpListenAddr(addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.HTTPHandler(base))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stderr, "berth mcp: streamable HTTP on http://%s/mcp (berth at %s; send your API key as a bearer token)\n", ln.Addr(), base)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}

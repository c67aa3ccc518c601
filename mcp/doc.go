// Package mcp is berth's Model Context Protocol server: sandboxes as tools
// for agents, over the Go client (package client) and the official Go MCP
// SDK (github.com/modelcontextprotocol/go-sdk). It is an API face like
// server and e2b, but outside the daemon: every tool call is one or a few
// calls of the native HTTP API with the caller's API key, so tenant keys
// scope it exactly as they scope the API, and it holds no privilege of its
// own.
//
// NewServer builds the MCP server from a Clients function that picks the
// berth client for each call: Static (stdio: the key `berth mcp` was
// configured with) or Bearer (streamable HTTP: the key the MCP client
// presents as its bearer token, forwarded to berth; see HTTPHandler).
//
// Tools: sandbox_create, sandbox_list, sandbox_destroy, exec, file_read,
// file_write, run_code, process_start, wait_for_port, expose_port,
// snapshot, fork. A berth error becomes an MCP tool error whose text is
// "<kind>: <message>", the kind being errdefs' code (not_found,
// invalid_argument, unauthenticated, ...), so an agent can tell a missing
// sandbox from a refused one.
package mcp

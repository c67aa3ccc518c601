// Package agentclient is the host side of the berth-agent protocol: it dials
// the agent's unix socket and runs exec and file operations in a sandbox.
//
// Everything the agent says is untrusted: a sandboxed root user can replace
// the agent, so every answer is bounded in size and in time, and the socket
// is dialed without following links planted in the directory the sandbox
// can write (DESIGN.md decision 2).
package agentclient

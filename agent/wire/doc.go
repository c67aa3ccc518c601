// Package wire is the protocol berth-agent speaks on its unix socket, the
// part both ends must agree on: the protocol version, the socket's name, the
// content types of streamed answers, the binary frames of a streamed exec
// ([type:1][length:4, big-endian][payload]), the upgrade token of a port
// tunnel, and the answer types that are not already in api.
//
// It is imported by the agent (which writes frames, inside the sandbox) and
// by agentclient (which reads them on the host, treating the agent as
// untrusted). It depends on nothing but the standard library, so the host
// binaries that speak to the agent link none of the agent's own machinery
// (pty, esbuild), and the static agent stays small.
package wire

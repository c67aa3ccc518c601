// Package agent is the server side of berth-agent, the small static program
// that runs as PID 1 inside every sandbox and serves exec and file operations
// over HTTP/1.1 on a unix socket.
//
// Everything that touches a path or a process inside a sandbox happens here,
// inside the sandbox's own mount namespace and root (DESIGN.md decision 1):
// a symlink planted by sandbox code can only resolve to something inside the
// sandbox, which is what defeats the docker cp class of bugs
// (CVE-2018-15664). Reading /etc/passwd and /etc/group is likewise safe here
// and only here: the host never parses sandbox files.
//
// Besides the standard library, golang.org/x/sys, api and internal/errdefs,
// it uses only creack/pty (terminals), coder/websocket (terminal streams) and
// esbuild's Transform (TypeScript contexts), so the agent binary stays small.
package agent

// ProtocolVersion is the agent wire protocol version. agentclient refuses an
// agent that reports a different one (a stale agent binary baked into an old
// snapshot, or a replaced one).
const ProtocolVersion = 1

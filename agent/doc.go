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
// Package agent keeps the server (routing, health, the unix socket), PID 1
// duties (the reaper, fd hygiene, log capping, the sudo helper) and the
// services that share the exec plan, the user database and the session
// table: exec, files and archives, background processes, shell sessions,
// readiness waits and git checkout. The services that stand alone have
// their own packages, each handed what it needs from the server:
//
//   - terminal: terminals on a pty (the only importer of creack/pty)
//   - interp: code contexts (the only importer of esbuild)
//   - watch: file watches on inotify
//   - forward: the port tunnel to the sandbox's loopback
//
// What both ends of the socket share is agent/wire; the helpers every
// service shares are under agent/internal (httpio, fspath, child).
//
// Besides the standard library, golang.org/x/sys, api and internal/errdefs,
// the agent uses only creack/pty (terminals), coder/websocket (terminal
// streams) and esbuild's Transform (TypeScript contexts), so the agent
// binary stays small.
package agent

package wire

// ProtocolVersion is the agent wire protocol version. agentclient refuses an
// agent that reports a different one (a stale agent binary baked into an old
// snapshot, or a replaced one).
const ProtocolVersion = 1

// SocketName is the name of the agent's unix socket in its run directory
// (/.berth/run inside the sandbox, the sandbox's run directory on the host).
const SocketName = "agent.sock"

// Content types of the agent's streamed answers. A client checks them before
// parsing a body, so an error page or a mismatched agent is not misread.
const (
	// ExecContentType is a stream of frames (see FrameType).
	ExecContentType = "application/vnd.berth.agent-frames"
	// ArchiveContentType is a tar stream, sent by GET /v1/archive and
	// accepted by PUT /v1/archive.
	ArchiveContentType = "application/x-tar"
	// CodeContentType is newline-delimited JSON events of a code run.
	CodeContentType = "application/x-ndjson"
	// WatchContentType is newline-delimited JSON file events of a watch.
	WatchContentType = "application/x-ndjson"
)

// ForwardProtocol is the Upgrade token of GET /v1/forward: after the 101
// answer the connection carries raw TCP bytes to and from a port on the
// sandbox's loopback.
const ForwardProtocol = "berth-tcp"

// ArchiveResult is the answer to PUT /v1/archive.
type ArchiveResult struct {
	// Files counts restored non-directory entries (regular files,
	// symlinks, hard links).
	Files int64 `json:"files"`
	// Dirs counts restored directories, DIR itself included.
	Dirs int64 `json:"dirs"`
	// Bytes is the total size of restored regular file contents.
	Bytes int64 `json:"bytes"`
}

// IdentityRequest is POST /v1/identity: the environment every later exec
// starts from, bound by the host when it hands a warm-pool member to its
// sandbox (node/local's pool). An agent accepts it once, and only when it
// was started with --pool-member.
type IdentityRequest struct {
	Env []string `json:"env"`
}

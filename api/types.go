package api

import (
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Sandbox states. A sandbox moves starting → running → sleeping → running …
// and ends destroyed; failed means the last start did not complete.
const (
	StateStarting  = "starting"
	StateRunning   = "running"
	StateSleeping  = "sleeping"
	StateDestroyed = "destroyed"
	StateFailed    = "failed"
)

// Resources is a custom instance size. VCPU may be fractional (0.25).
type Resources struct {
	VCPU      float64 `json:"vcpu"`
	MemoryMiB int64   `json:"memoryMib"`
	DiskMB    int64   `json:"diskMb"`
}

// CreateSandboxRequest creates a sandbox, or with get-or-create semantics
// returns the existing one (waking it if it sleeps). Image, Instance and
// Internet apply at each start, so a sleeping sandbox can wake with new ones.
type CreateSandboxRequest struct {
	Name      string            `json:"name"`
	Image     string            `json:"image,omitempty"`    // name, ref or sha256 digest; default "debian-trixie"
	Instance  string            `json:"instance,omitempty"` // lite, basic, standard-1..4; default "standard-1"
	Resources *Resources        `json:"resources,omitempty"`
	Internet  *bool             `json:"internet,omitempty"` // default false
	Env       Env               `json:"env,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// SleepAfter is a Go duration ("10m", "30s"); default 10m.
	SleepAfter string `json:"sleepAfter,omitempty"`
	KeepAlive  *bool  `json:"keepAlive,omitempty"`
	// Snapshot starts a new sandbox from a snapshot (its files over the
	// snapshot's base image). Ignored for an existing sandbox.
	Snapshot string `json:"snapshot,omitempty"`
	// Persist is "none" (default), "disk" or "interval": see PersistDisk
	// and PersistInterval.
	Persist string `json:"persist,omitempty"`
	// PersistEvery is the checkpoint period of persist "interval" (a
	// duration between 1m and 24h, like "10m"); required with it, refused
	// without it.
	PersistEvery string `json:"persistEvery,omitempty"`
	// Network is the egress policy; when set, its Internet overrides the
	// Internet field above. It applies at once to a running sandbox.
	Network *NetworkPolicy `json:"network,omitempty"`
	// Isolation is IsolationRunc (default) or IsolationGVisor; fixed at
	// creation.
	Isolation string `json:"isolation,omitempty"`
	// Sleep is the sleep mode (SleepFreeze, SleepCheckpoint, SleepStop);
	// "" is the operator's default. Fixed at creation.
	Sleep string `json:"sleep,omitempty"`
	// Volumes are named volumes mounted at each start (see Volume).
	// Fixed at creation.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Start is the sandbox's own start command ("image" for the image's
	// ENTRYPOINT/CMD), run at every boot from files; with Ready, the call
	// that boots the sandbox waits for it. Fixed at creation.
	Start *StartCommand `json:"start,omitempty"`
}

// Isolation levels.
const (
	IsolationRunc   = "runc"   // namespaces, user namespace, seccomp, minimal caps
	IsolationGVisor = "gvisor" // gVisor's user-space kernel (runsc)
)

// Sandbox is the controller's view of one named sandbox.
type Sandbox struct {
	Name        string            `json:"name"`
	ID          string            `json:"id"`
	State       string            `json:"state"`
	Image       string            `json:"image"`       // what the user asked for
	ImageDigest string            `json:"imageDigest"` // what it started from
	Instance    string            `json:"instance"`
	Resources   Resources         `json:"resources"`
	Internet    bool              `json:"internet"`
	Env         Env               `json:"env,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	SleepAfter  string            `json:"sleepAfter"`
	KeepAlive   bool              `json:"keepAlive"`
	IP          string            `json:"ip,omitempty"`
	CreatedAt   time.Time         `json:"createdAt"`
	StartedAt   *time.Time        `json:"startedAt,omitempty"`
	LastActive  time.Time         `json:"lastActive"`
	SleepAt     *time.Time        `json:"sleepAt,omitempty"`
	Error       string            `json:"error,omitempty"` // why it failed, when State is failed
	OOMKilled   bool              `json:"oomKilled,omitempty"`
	Snapshot    string            `json:"snapshot,omitempty"` // the snapshot it started from
	Persist     string            `json:"persist,omitempty"`
	// PersistEvery is the checkpoint period of persist "interval", and
	// LastCheckpoint when the newest checkpoint was taken.
	PersistEvery   string         `json:"persistEvery,omitempty"`
	LastCheckpoint *time.Time     `json:"lastCheckpoint,omitempty"`
	Network        *NetworkPolicy `json:"network,omitempty"`
	Isolation      string         `json:"isolation,omitempty"`
	// Node is the node that runs (or last ran) the sandbox: its owner in
	// a cluster, the local node's name on a single host.
	Node string `json:"node,omitempty"`
	// Sleep is the sandbox's sleep mode (SleepFreeze, SleepCheckpoint,
	// SleepStop). While it sleeps, SleepTier is the tier it sleeps in now
	// (a frozen sandbox escalates to checkpoint or stop) and FrozenAt,
	// with the freeze tier, when it was frozen. The state stays
	// "sleeping" in every tier.
	Sleep     string     `json:"sleep,omitempty"`
	SleepTier string     `json:"sleepTier,omitempty"`
	FrozenAt  *time.Time `json:"frozenAt,omitempty"`
	// LastWake says how the last wake went: "thaw" (processes continued)
	// or "reboot: <why>" (booted from its files instead); "" after a stop
	// tier's wake, which always boots from files.
	LastWake string `json:"lastWake,omitempty"`
	// Volumes are the sandbox's volume mounts.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Start is the sandbox's start command (its process has the id
	// StartProcessID).
	Start *StartCommand `json:"start,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ExecRequest runs one command. Exactly one of Argv and Command is set;
// Command is run with /bin/sh -c.
type ExecRequest struct {
	Argv      []string `json:"argv,omitempty"`
	Command   string   `json:"command,omitempty"`
	Cwd       string   `json:"cwd,omitempty"` // default: the user's home
	Env       Env      `json:"env,omitempty"`
	User      string   `json:"user,omitempty"` // default: "user" if the image has it, else root
	Stdin     []byte   `json:"stdin,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"` // 0: no timeout
}

// ExitStatus ends every exec. Signal is set when the process was killed by a
// signal (then ExitCode is 128+signal, as a shell reports it).
type ExitStatus struct {
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	DurationMs int64  `json:"durationMs"`
}

// ExecResult is the buffered form of an exec.
type ExecResult struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	ExitStatus
	// Truncated is true when output exceeded the buffered limit; use the
	// streaming form for unbounded output.
	Truncated bool `json:"truncated,omitempty"`
}

// ExecEvent is one server-sent event of a streamed exec. Type is "stdout",
// "stderr" (Data holds the bytes), "exit" (Exit is set) or "error" (Error is
// set). A stream ends with exactly one exit or error event; it never ends
// with an invented exit code.
type ExecEvent struct {
	Type  string      `json:"type"`
	Data  []byte      `json:"data,omitempty"`
	Exit  *ExitStatus `json:"exit,omitempty"`
	Error *Error      `json:"error,omitempty"`
}

// FileInfo describes one file in a sandbox.
type FileInfo struct {
	Path    string    `json:"path"` // absolute, inside the sandbox
	Name    string    `json:"name"`
	Type    string    `json:"type"` // file, dir, symlink, other
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	ModTime time.Time `json:"modTime"`
	Target  string    `json:"target,omitempty"` // symlink target
	UID     uint32    `json:"uid"`              // owner, as numbers: names are the sandbox's
	GID     uint32    `json:"gid"`              // own /etc/passwd and /etc/group
	// MimeType and Binary describe a regular file's content, from its
	// name and first 512 bytes (internal/filetype); empty for others.
	MimeType string `json:"mimeType,omitempty"`
	Binary   bool   `json:"binary,omitempty"`
}

// BinaryHeader on a file download says whether its content is binary
// ("true" or "false"), by the rules of FileInfo.Binary.
const BinaryHeader = "X-Berth-Binary"

// FileList is the body of a directory listing.
type FileList struct {
	Files []FileInfo `json:"files"`
}

// MkdirRequest is mkdir -p.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"`
}

// RenameRequest moves From to To inside one sandbox.
type RenameRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// ExistsResponse answers an exists query.
type ExistsResponse struct {
	Exists bool `json:"exists"`
}

// Image is one image in the local store.
type Image struct {
	Name   string `json:"name,omitempty"` // named image, if any
	Ref    string `json:"ref,omitempty"`  // where it came from
	Digest string `json:"digest"`         // manifest digest, sha256:…
	Size   int64  `json:"size"`           // compressed layer bytes
	Layers int    `json:"layers"`
	// Labels of the image config. build-base images carry
	// "sh.berth.base-recipe", which changes whenever the recipe does.
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
}

// ImageList is the body of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
}

// PullRequest pulls an image reference and optionally names it.
type PullRequest struct {
	Ref  string `json:"ref"`
	Name string `json:"name,omitempty"`
}

// PushRequest pushes the stored image Image (a name, digest or
// reference) to a registry as Ref (POST /v1/images/push, operator only).
type PushRequest struct {
	Image string `json:"image"`
	Ref   string `json:"ref"`
}

// Progress is one event of a long operation (pull, import, build-base),
// streamed as server-sent events. The last event has Done or Error set.
type Progress struct {
	Message string `json:"message,omitempty"`
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Done    bool   `json:"done,omitempty"`
	Image   *Image `json:"image,omitempty"`
	Error   *Error `json:"error,omitempty"`
}

// Error is the body of every error response: {code, message}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID is the request's id (also the X-Request-Id response
	// header and the daemon's log line), to quote in a report.
	RequestID string `json:"requestId,omitempty"`
}

// Health is the body of GET /v1/health on the server and on the agent.
type Health struct {
	Status   string `json:"status"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol,omitempty"` // agent protocol version
	// Node is the name of the member that answered (a single host is a
	// cluster of one): with several URLs, which is which.
	Node string `json:"node,omitempty"`
}

// CheckShape refuses a request that names no command, names it twice
// (argv and command) or has a negative timeout: what every place that runs
// an exec checks before it wakes anything.
func (r ExecRequest) CheckShape() error {
	switch {
	case len(r.Argv) == 0 && r.Command == "":
		return errdefs.InvalidArgument("exec needs argv or command")
	case len(r.Argv) > 0 && r.Command != "":
		return errdefs.InvalidArgument("exec takes argv or command, not both")
	case r.TimeoutMs < 0:
		return errdefs.InvalidArgument("timeoutMs must not be negative")
	}
	return nil
}

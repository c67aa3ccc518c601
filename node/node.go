package node

import (
	"context"
	"io"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// Node runs sandboxes on one machine; name is a sandbox name. Every method
// returns errors from internal/errdefs (a missing sandbox is
// errdefs.ErrNotFound), so that each face maps them to its own status.
type Node interface {
	// Start starts or wakes the named sandbox (see StartOptions).
	Start(ctx context.Context, name string, o StartOptions) error
	// Update changes the options of an existing sandbox without starting
	// it, as a Start would: the network policy and SleepAfter/KeepAlive
	// apply at once, the rest at the next start.
	Update(ctx context.Context, name string, o StartOptions) error
	// Stop stops a running sandbox and keeps its files (it sleeps; the
	// next Start wakes it). It reports whether it stopped it: false when
	// it was not running or, with IdleSince, not idle.
	Stop(ctx context.Context, name string, o StopOptions) (bool, error)
	// Destroy removes the sandbox and everything it holds on this node.
	Destroy(ctx context.Context, name, reason string) error
	Status(ctx context.Context, name string) (Status, error)
	// Exec runs argv in the running sandbox; its output streams.
	Exec(ctx context.Context, name string, argv []string, o ExecOptions) (Process, error)
	// Signal signals the sandbox's entrypoint (StartOptions.Entrypoint).
	Signal(ctx context.Context, name string, sig int) error
	SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error
	Snapshot(ctx context.Context, name string, o SnapshotOptions) (SnapshotHandle, error)
	// Images maps the operator's image names to pinned digests.
	Images(ctx context.Context) (map[string]string, error)
	// Agent is the running sandbox's agent, for files, processes,
	// sessions, terminals, watches and git; its bytes stream both ways
	// unbuffered. The sandbox counts as busy (it does not sleep) until
	// release is called. Agent does not wake a sleeping sandbox: that is
	// the control plane's decision (Start).
	Agent(ctx context.Context, name string) (ag *agentclient.Client, release func(), err error)
	// Info is what the node reports about itself: capacity and what it
	// holds, for placement.
	Info(ctx context.Context) (Info, error)
}

// Info is a node's report about itself.
type Info struct {
	// ID names the node in its cluster ("local" for the single host).
	ID       string   `json:"id"`
	Capacity Capacity `json:"capacity"`
	// Images are the image digests this node holds: in its image store
	// or unpacked for a sandbox (a start from one needs no pull).
	Images []string `json:"images"`
	// SnapshotLayers are the snapshot layer digests cached here.
	SnapshotLayers []string `json:"snapshotLayers"`
	// SnapshotLayerBytes is each of SnapshotLayers' compressed size in
	// bytes (the blob's), keyed as in SnapshotLayers; a layer whose size
	// the node cannot tell is missing here. Placement weighs a snapshot
	// chain's cached share by it.
	SnapshotLayerBytes map[string]int64 `json:"snapshotLayerBytes,omitempty"`
	// Isolation lists the isolation backends the node can start
	// (api.IsolationRunc, api.IsolationGVisor).
	Isolation []string `json:"isolation,omitempty"`
}

// Capacity is what a node can give sandboxes and what it has given.
type Capacity struct {
	VCPU          float64 `json:"vcpu"`
	MemoryMiB     int64   `json:"memoryMib"`
	DiskMB        int64   `json:"diskMb"`
	Sandboxes     int     `json:"sandboxes"` // running now
	UsedVCPU      float64 `json:"usedVcpu"`
	UsedMemoryMiB int64   `json:"usedMemoryMib"`
	// UsedDiskMB is the disk limits of every sandbox whose files the node
	// keeps (a sleeping sandbox's writable layer stays on its disk).
	UsedDiskMB int64 `json:"usedDiskMb,omitempty"`
	// InFlight counts the creates and wakes in progress (sandboxes
	// starting); their resources join UsedVCPU and UsedMemoryMiB once
	// they run.
	InFlight int `json:"inFlight,omitempty"`
}

// Resources is a custom instance size.
type Resources struct {
	VCPU      float64 `json:"vcpu"`
	MemoryMiB int64   `json:"memoryMib"`
	DiskMB    int64   `json:"diskMb"`
}

// StartOptions choose what the sandbox starts from. Image and Snapshot
// are mutually exclusive; Instance names a size ("lite", "basic",
// "standard-1" … "standard-4") unless Resources gives a custom one.
//
// Starting a sandbox that exists but sleeps wakes it with its files:
// Image must then be empty or the image it was created from, Snapshot
// must be nil (a snapshot starts afresh: the old files go), Env, Labels,
// Persist, Sleep and Isolation keep their values from creation (an Isolation
// that differs is refused), and Instance, Resources, Internet, Network,
// SleepAfter and KeepAlive apply from this start on.
type StartOptions struct {
	Image      string            `json:"image,omitempty"`
	Snapshot   *SnapshotHandle   `json:"snapshot,omitempty"`
	Instance   string            `json:"instance,omitempty"`
	Resources  *Resources        `json:"resources,omitempty"`
	Internet   bool              `json:"internet"`
	Env        map[string]string `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	// Network is the egress policy (allow/deny rules, secret injection);
	// nil keeps the sandbox's policy (with Internet applied), or is
	// Internet alone for a new one. When set, its Internet wins.
	Network *api.NetworkPolicy `json:"network,omitempty"`
	// Isolation is api.IsolationRunc or api.IsolationGVisor; "" is the
	// platform's default. Chosen at creation.
	Isolation string `json:"isolation,omitempty"`
	// Persist is api.PersistDisk (or api.PersistInterval, which also
	// checkpoints a running sandbox every PersistEvery) to copy the files off the host at every
	// sleep; "" is api.PersistNone. Chosen at creation.
	Persist string `json:"persist,omitempty"`
	// PersistEvery is the checkpoint period of api.PersistInterval.
	PersistEvery time.Duration `json:"persistEvery,omitempty"`
	// Sleep is the sleep mode (api.SleepFreeze, api.SleepCheckpoint,
	// api.SleepStop); "" is the node's default. Chosen at creation.
	Sleep string `json:"sleep,omitempty"`
	// Volumes are named volumes mounted at each start. Chosen at creation.
	Volumes []api.VolumeMount `json:"volumes,omitempty"`
	// Start is the start command run at every boot from files. Chosen at
	// creation.
	Start *api.StartCommand `json:"start,omitempty"`
	// SleepAfter is the inactivity timeout (0: the platform's 10m) and
	// KeepAlive turns it off.
	SleepAfter time.Duration `json:"sleepAfter,omitempty"`
	KeepAlive  bool          `json:"keepAlive,omitempty"`
	// SelfSleep says the object puts the sandbox to sleep itself (from
	// its alarm, on Status's LastActive): the node's own inactivity timer
	// then leaves it running, and SleepAfter and KeepAlive are only
	// reported (api.Sandbox.SleepAt).
	SelfSleep bool `json:"selfSleep,omitempty"`
}

// StopOptions tune Node.Stop.
type StopOptions struct {
	// Reason is journaled ("requested", "idle for 10m0s", …).
	Reason string `json:"reason,omitempty"`
	// IdleSince, when set, makes the stop conditional: it does nothing if
	// the sandbox had activity after IdleSince or has an operation in
	// flight (checked atomically with the stop, under the node's lock).
	IdleSince time.Time `json:"idleSince,omitzero"`
}

// ExecOptions tune one Exec.
type ExecOptions struct {
	Cwd   string            `json:"cwd,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	User  string            `json:"user,omitempty"`
	Stdin []byte            `json:"stdin,omitempty"`
	PTY   bool              `json:"pty,omitempty"`
}

// SnapshotOptions name a sandbox snapshot.
type SnapshotOptions struct {
	Name string        `json:"name,omitempty"`
	TTL  time.Duration `json:"ttl,omitempty"` // 0: the platform default
}

// SnapshotHandle is plain data: store it and start from it later, from
// this sandbox or any other.
type SnapshotHandle struct {
	ID              string `json:"id"`
	Name            string `json:"name,omitempty"`
	SizeBytes       int64  `json:"sizeBytes"`
	BaseImageDigest string `json:"baseImageDigest"`
}

// ExitInfo is what a monitor reports when the sandbox stops.
type ExitInfo struct {
	ExitCode int    `json:"exitCode"` // -1 when the node does not know it
	Reason   string `json:"reason"`   // destroyed, slept, failed, oom-killed, …
}

// Status is the node's view of one sandbox.
type Status struct {
	Exists  bool   `json:"exists"`
	Running bool   `json:"running"`
	State   string `json:"state,omitempty"`
	Error   string `json:"error,omitempty"`
	OOM     bool   `json:"oom,omitempty"`
	// ExitCode is the exit code of the entrypoint (StartOptions.
	// Entrypoint) once it ended; nil when unknown or still running.
	ExitCode *int `json:"exitCode,omitempty"`
	// LastActive is the last API activity on the sandbox (exec, files,
	// terminals, starts); Busy says an operation is in flight now. An
	// object that sleeps its sandbox itself (SelfSleep) decides on them.
	LastActive time.Time `json:"lastActive,omitzero"`
	Busy       bool      `json:"busy,omitempty"`
	// Sandbox is the sandbox's full public view (as GET
	// /v1/sandboxes/{name} shows it); zero when it does not exist.
	Sandbox api.Sandbox `json:"sandbox,omitzero"`
}

// Process is a running Exec.
type Process interface {
	Stdout() io.Reader
	Stderr() io.Reader
	// Wait blocks until the process exits and returns its exit code.
	Wait(ctx context.Context) (int, error)
	// Kill ends the process.
	Kill() error
}

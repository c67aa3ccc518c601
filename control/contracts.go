package control

import (
	"context"
	"encoding/json"
	"io"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// Backend is what the native HTTP face (package server) needs from the
// rest of berth. The daemon's control plane implements it; tests use
// small fakes. Every method returns
// errors from internal/errdefs so that api.HTTPStatus can map them.
type Backend interface {
	Sandboxes
	Files
	Images
	Snapshots
	AgentAccess
	Ports
}

// Ports is the preview URL half of the backend.
type Ports interface {
	ExposePort(ctx context.Context, name string, req api.ExposePortRequest) (api.ExposedPort, error)
	UnexposePort(ctx context.Context, name string, port int) error
	ListPorts(ctx context.Context, name string) ([]api.ExposedPort, error)
}

// ListFilter selects sandboxes by state and by labels (all must match).
type ListFilter struct {
	State  string
	Labels map[string]string
}

// Sandboxes is the lifecycle half of the backend.
type Sandboxes interface {
	// GetOrCreate returns the named sandbox, creating it or waking it as
	// needed, and reports whether it was created. With createOnly, an
	// existing sandbox is an AlreadyExists error.
	GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error)
	Get(ctx context.Context, name string) (api.Sandbox, error)
	List(ctx context.Context, f ListFilter) ([]api.Sandbox, error)
	Destroy(ctx context.Context, name string) error
	// Sleep stops the sandbox's compute now, keeping its files.
	Sleep(ctx context.Context, name string) error
	// Exec runs a command, waking the sandbox if needed, and streams its
	// output to stdout and stderr as it is produced.
	Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error)
}

// Files is the files API. Paths are resolved inside the sandbox by its agent.
type Files interface {
	ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error
	ListFiles(ctx context.Context, name, path string, recursive bool) ([]api.FileInfo, error)
	Stat(ctx context.Context, name, path string) (api.FileInfo, error)
	Mkdir(ctx context.Context, name string, req api.MkdirRequest) error
	Remove(ctx context.Context, name, path string, recursive bool) error
	Rename(ctx context.Context, name string, req api.RenameRequest) error
	Exists(ctx context.Context, name, path string) (bool, error)
}

// Images is the image store half of the backend. progress may be nil.
type Images interface {
	ListImages(ctx context.Context) ([]api.Image, error)
	PullImage(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error)
	ImportImage(ctx context.Context, name string, r io.Reader, progress func(api.Progress)) (api.Image, error)
	BuildBase(ctx context.Context, progress func(api.Progress)) (api.Image, error)
	RemoveImage(ctx context.Context, ref string) error
}

// ImagePushes pushes stored images to a registry (image.Store.Push).
type ImagePushes interface {
	PushImage(ctx context.Context, req api.PushRequest, progress func(api.Progress)) (api.Image, error)
}

// ImageBuilds runs Dockerfile builds (package imagebuild). The context is
// a tar stream; progress (may be nil) gets the build log line by line.
type ImageBuilds interface {
	BuildImage(ctx context.Context, req api.BuildRequest, contextTar io.Reader, progress func(api.Progress)) (api.Image, error)
}

// Snapshots is the snapshot, fork and backup half of the backend.
type Snapshots interface {
	Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error)
	GetSnapshot(ctx context.Context, id string) (api.Snapshot, error)
	// ListSnapshots filters by sandbox and by name when they are not empty.
	ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error)
	CreateBackup(ctx context.Context, sandbox string, req api.BackupRequest) (api.Backup, error)
	ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error)
	DeleteBackup(ctx context.Context, id string) error
	RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error)
}

// AgentAccess hands out a sandbox's agent client for the dev-loop features
// (processes, sessions, terminals, watch, git), waking the sandbox if it
// sleeps. The sandbox stays awake until release is called, so streams
// (logs, terminals, watches) must release only when they end.
type AgentAccess interface {
	Agent(ctx context.Context, name string) (ag *agentclient.Client, release func(), err error)
}

// Egress is the optional network-policy, secrets and egress-audit half of
// the backend. A backend without it answers these routes with 412.
type Egress interface {
	GetNetwork(ctx context.Context, name string) (api.NetworkPolicy, error)
	SetNetwork(ctx context.Context, name string, p api.NetworkPolicy) (api.NetworkPolicy, error)
	EgressLog(ctx context.Context, name string, limit int) ([]api.EgressEvent, error)
	// SetSecret stores a value that no route ever returns.
	SetSecret(ctx context.Context, name, value string) error
	ListSecrets(ctx context.Context) ([]api.Secret, error)
	DeleteSecret(ctx context.Context, name string) error
}

// Nodes is the cluster's membership as the API shows it (GET /v1/nodes,
// berth node ls): every node's entry with its health judged by the one
// liveness rule (package control/membership), and draining. Operator-only:
// the server refuses tenants before calling it.
type Nodes interface {
	ListNodes(ctx context.Context) (api.NodeList, error)
	// GetNode is not found for a name that never registered.
	GetNode(ctx context.Context, name string) (api.Node, error)
	// SetNodeDraining sets or clears draining and returns the entry as
	// it is now; not found for a name that never registered.
	SetNodeDraining(ctx context.Context, name string, draining bool) (api.Node, error)
}

// Objects is the durable-object RPC face (package durable's Host).
type Objects interface {
	// CallObject runs method on the object (class, id) with JSON args.
	// Unknown class or method: not found; bad args: invalid argument.
	CallObject(ctx context.Context, class, id, method string, args json.RawMessage) (json.RawMessage, error)
	// ObjectJournalName is the journal stream of the object, so that its
	// RPCs are journaled next to its container's lifecycle.
	ObjectJournalName(ctx context.Context, class, id string) string
}

// Labels keeps a face's per-sandbox state (the E2B API's) in the
// sandbox's labels.
type Labels interface {
	// SetLabels writes labels (an empty value removes one) without waking
	// the sandbox.
	SetLabels(ctx context.Context, name string, set map[string]string) (api.Sandbox, error)
}

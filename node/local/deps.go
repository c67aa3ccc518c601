package local

import (
	"context"
	"io"
	"net/netip"
	"syscall"

	"github.com/berth-sh/berth/api"
)

// The controller's dependencies are small interfaces defined here, where
// they are used; daemon wires the real implementations (image, rootfs,
// network, runtime) and tests may pass fakes.

// Image is what the controller needs to know about a resolved image.
type Image struct {
	Digest     string
	Env        []string
	WorkingDir string
	// User is the image's USER: the sandbox's default user when set.
	User string
	// Entrypoint and Cmd are the image's own start command (exec form),
	// run by a sandbox created with api.StartCommand.Image.
	Entrypoint []string
	Cmd        []string
	LayerDirs  []string // unpacked read-only layers, lowest first
}

// Images resolves a reference and makes its layers ready on this host.
type Images interface {
	Prepare(ctx context.Context, ref string) (Image, error)
}

// IDRange maps sandbox ids 0..Size-1 to host ids HostID.. (uids and gids).
// The zero value is no mapping.
type IDRange struct {
	HostID, Size uint32
}

// Rootfs mounts a sandbox's overlay root with its disk limit. With a
// non-zero idmap the layers are seen through idmapped mounts.
type Rootfs interface {
	Mount(ctx context.Context, id string, lowers []string, diskBytes int64, idmap IDRange) (string, error)
	Unmount(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	Mounted(ctx context.Context) ([]string, error)
	Known(ctx context.Context) ([]string, error)
	// UpperDir is where a sandbox's writable layer lives (it may not exist).
	UpperDir(id string) string
}

// Volumes mounts named volumes into a sandbox's root before its
// container starts and unmounts them when it stops (package volume).
// Attach claims them (one writer per volume) all or none; Detach releases
// the claims and is idempotent (rootfs may be "" when it is not known,
// after a restart: the rootfs unmount then takes the mounts along).
type Volumes interface {
	Attach(ctx context.Context, sandbox, tenant, rootfs string, ms []api.VolumeMount, idmap IDRange) error
	Detach(ctx context.Context, sandbox, rootfs string, ms []api.VolumeMount) error
}

// Attachment is a sandbox's place on the network.
type Attachment struct {
	NetNSPath string
	IP        netip.Addr
}

// Network gives each sandbox its own network namespace.
type Network interface {
	Setup(ctx context.Context, id string, internet bool) (Attachment, error)
	Teardown(ctx context.Context, id string) error
	Cleanup(ctx context.Context, keep map[string]bool) error
}

// Container is the runtime's view of one container.
type Container struct {
	ID     string
	Status string // created, running, stopped, paused
	Pid    int
}

// Runtime drives an OCI runtime (runc, crun, runsc).
type Runtime interface {
	Create(ctx context.Context, id, bundle string) error
	Start(ctx context.Context, id string) error
	// Run is Create then Start, in one runtime command where the runtime
	// can (`runc run --detach`: one process spawn less per start).
	Run(ctx context.Context, id, bundle string) error
	Kill(ctx context.Context, id string, sig syscall.Signal) error
	Delete(ctx context.Context, id string, force bool) error
	// Pause and Resume freeze and thaw every process of a container.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	State(ctx context.Context, id string) (Container, error)
	List(ctx context.Context) ([]Container, error)
	// OOMKilled reports whether the container's cgroup saw an OOM kill.
	OOMKilled(id string) bool
	// CleanupCgroups removes cgroups of containers not in keep.
	CleanupCgroups(keep map[string]bool) error
	// WriteBundle writes the OCI bundle (config.json) for a sandbox. It
	// may mount things under dir (a sysfs for a sandbox in a user
	// namespace); ReleaseBundle undoes that before dir is removed.
	WriteBundle(dir string, b Bundle) error
	ReleaseBundle(dir string) error
	// Verify checks that the running container has the posture its spec
	// asked for; an error fails the start (fail closed).
	Verify(ctx context.Context, id, bundle string) error
	// InitPid is the host pid of the container's main process, from what
	// the runtime wrote at create (no process spawn).
	InitPid(id, bundle string) (int, error)
}

// Bundle is everything the runtime needs to build a container spec.
type Bundle struct {
	ID, Hostname string
	RootfsPath   string
	Args, Env    []string
	Cwd          string
	MilliCPU     int64
	MemoryBytes  int64
	Pids         int64
	NetNSPath    string
	// UserNS, if non-zero, runs the sandbox in a user namespace with this
	// mapping.
	UserNS IDRange
	// Isolation is api.IsolationRunc or api.IsolationGVisor.
	Isolation string
	// Binds are host path → container path bind mounts; RO marks read-only.
	Binds []Bind
}

// Bind is one bind mount into the sandbox.
type Bind struct {
	Source, Target string
	RO             bool
}

// Snapshotter turns writable layers into snapshot blobs and back.
type Snapshotter interface {
	// Capture writes upperDir as a compressed layer to w.
	Capture(ctx context.Context, upperDir string, w io.Writer) (CaptureStats, error)
	// Squash writes the merge of layer dirs (lowest first) as one layer.
	Squash(ctx context.Context, layers []string, w io.Writer) (CaptureStats, error)
	// Layer returns the unpacked dir of a snapshot layer, fetching and
	// verifying its blob through open on first use on this host.
	Layer(ctx context.Context, id, sha256 string, open func(ctx context.Context) (io.ReadCloser, error)) (string, error)
	// Forget drops a cached layer.
	Forget(id string) error
}

// LayerPrimer is the optional part of a Snapshotter that builds this
// host's copy of a layer while it is captured, so a layer about to be used
// here (a fork's) needs no fetch and decompression of its own blob.
type LayerPrimer interface {
	// CapturePrimed is Capture that also builds the layer. After the blob
	// is stored, commit(id, sha256) makes it snapshot id's cached layer;
	// abort discards it. Exactly one of them is called when err is nil.
	CapturePrimed(ctx context.Context, upperDir string, w io.Writer) (st CaptureStats, commit func(id, sha256 string) error, abort func(), err error)
}

// CaptureStats describes one captured layer.
type CaptureStats struct {
	Files, UncompressedBytes, CompressedBytes int64
	SHA256                                    string
}

// UpperSnapshots is the optional part of Rootfs used by snapshots.
type UpperSnapshots interface {
	// SnapshotUpper makes an instant read-only copy of a sandbox's upper
	// dir and returns its path and a release func.
	SnapshotUpper(ctx context.Context, id string) (string, func() error, error)
}

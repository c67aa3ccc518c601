package durable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Resources is a custom instance size.
type Resources struct {
	VCPU      float64 `json:"vcpu"`
	MemoryMiB int64   `json:"memoryMib"`
	DiskMB    int64   `json:"diskMb"`
}

// StartOptions choose what the container starts from. Image and Snapshot
// are mutually exclusive; Instance names a size ("lite", "basic",
// "standard-1" … "standard-4") unless Resources gives a custom one.
type StartOptions struct {
	Image      string            `json:"image,omitempty"`
	Snapshot   *SnapshotHandle   `json:"snapshot,omitempty"`
	Instance   string            `json:"instance,omitempty"`
	Resources  *Resources        `json:"resources,omitempty"`
	Internet   bool              `json:"internet"`
	Env        map[string]string `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
}

// ExecOptions tune one Exec.
type ExecOptions struct {
	Cwd   string
	Env   map[string]string
	User  string
	Stdin []byte
	PTY   bool
}

// SnapshotOptions name a container snapshot.
type SnapshotOptions struct {
	Name string
	TTL  time.Duration // 0: the platform default
}

// SnapshotHandle is plain data: store it in Storage and start from it
// later, from this object or any other.
type SnapshotHandle struct {
	ID              string `json:"id"`
	Name            string `json:"name,omitempty"`
	SizeBytes       int64  `json:"sizeBytes"`
	BaseImageDigest string `json:"baseImageDigest"`
}

// ExitInfo is what Monitor reports when the container stops.
type ExitInfo struct {
	ExitCode int    `json:"exitCode"` // -1 when the platform does not know it
	Reason   string `json:"reason"`   // destroyed, slept, failed, oom-killed, …
}

// Status is the compute's view of one container.
type Status struct {
	Exists  bool
	Running bool
	State   string
	Error   string
	OOM     bool
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

// Compute is what the platform provides to run containers. The daemon
// implements it on the sandbox controller: name is a sandbox name.
type Compute interface {
	Start(ctx context.Context, name string, o StartOptions) error
	Status(ctx context.Context, name string) (Status, error)
	Exec(ctx context.Context, name string, argv []string, o ExecOptions) (Process, error)
	Signal(ctx context.Context, name string, sig int) error
	Destroy(ctx context.Context, name, reason string) error
	SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error
	Snapshot(ctx context.Context, name string, o SnapshotOptions) (SnapshotHandle, error)
	// Images maps the operator's image names to pinned digests.
	Images(ctx context.Context) (map[string]string, error)
}

// Container controls one object's compute: a berth sandbox named after
// the object (SandboxName). Lifecycle calls are journaled.
type Container struct {
	compute Compute
	name    string
	addr    Address
	journal *State
}

// BuiltinSandboxClass is the class name of berth's built-in sandbox
// controller (registered by the daemon).
const BuiltinSandboxClass = "Sandbox"

var dnsBad = regexp.MustCompile(`[^a-z0-9-]+`)

// SandboxName is the sandbox that holds the compute of the object at
// addr: a readable prefix plus a hash of the address, so that distinct
// addresses never share a sandbox and the name is a valid DNS label.
func SandboxName(addr Address) string {
	if addr.Class == BuiltinSandboxClass && api.ValidateSandboxName(addr.ID) == nil {
		// The built-in controller's object for sandbox name is that
		// sandbox's controller: same name, same journal.
		return addr.ID
	}
	sum := sha256.Sum256([]byte(addr.Class + "\x00" + addr.ID))
	p := strings.Trim(dnsBad.ReplaceAllString(strings.ToLower(addr.Class+"-"+addr.ID), "-"), "-")
	if len(p) > 40 {
		p = strings.Trim(p[:40], "-")
	}
	if p == "" || p[0] < 'a' || p[0] > 'z' {
		p = "o" + p
	}
	return p + "-" + hex.EncodeToString(sum[:5])
}

func (c *Container) ready() error {
	if c.compute == nil {
		return errdefs.FailedPrecondition("this berth has no compute for objects")
	}
	return nil
}

// Name is the sandbox name of this object's compute.
func (c *Container) Name() string { return c.name }

// Start starts the container. It is an error to start a running one, or
// to give both Image and Snapshot.
func (c *Container) Start(ctx context.Context, o StartOptions) error {
	if err := c.ready(); err != nil {
		return err
	}
	if o.Image != "" && o.Snapshot != nil {
		return errdefs.InvalidArgument("start: give an image or a snapshot, not both")
	}
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	o.Labels["berth.object.class"] = c.addr.Class
	return c.journal.record(ctx, "container.start", redactStart(o), func(ctx context.Context) error {
		return c.compute.Start(ctx, c.name, o)
	})
}

// Running reports whether the container runs now.
func (c *Container) Running(ctx context.Context) bool {
	if c.ready() != nil {
		return false
	}
	st, err := c.compute.Status(ctx, c.name)
	return err == nil && st.Running
}

// Exec runs argv in the container (no shell) and returns the process.
func (c *Container) Exec(ctx context.Context, argv []string, o ExecOptions) (Process, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, errdefs.InvalidArgument("exec: empty argv")
	}
	return c.compute.Exec(ctx, c.name, argv, o)
}

// Signal sends sig to the container's main process.
func (c *Container) Signal(ctx context.Context, sig int) error {
	if err := c.ready(); err != nil {
		return err
	}
	return c.journal.record(ctx, "container.signal", map[string]int{"signal": sig}, func(ctx context.Context) error {
		return c.compute.Signal(ctx, c.name, sig)
	})
}

// Destroy stops the container now and removes its writable layer (its
// snapshots stay). Destroying a missing container is not an error.
func (c *Container) Destroy(ctx context.Context, reason string) error {
	if err := c.ready(); err != nil {
		return err
	}
	return c.journal.record(ctx, "container.destroy", map[string]string{"reason": reason}, func(ctx context.Context) error {
		err := c.compute.Destroy(ctx, c.name, reason)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	})
}

// Monitor blocks until the container is no longer running and reports
// why. It returns at once for a container that is not running.
func (c *Container) Monitor(ctx context.Context) (ExitInfo, error) {
	if err := c.ready(); err != nil {
		return ExitInfo{}, err
	}
	for {
		st, err := c.compute.Status(ctx, c.name)
		if err != nil {
			return ExitInfo{}, err
		}
		if !st.Running {
			info := ExitInfo{ExitCode: -1, Reason: st.State}
			switch {
			case !st.Exists:
				info.Reason = "destroyed"
			case st.OOM:
				info.Reason, info.ExitCode = "oom-killed", 137
			case st.Error != "":
				info.Reason = st.State + ": " + st.Error
			}
			return info, nil
		}
		select {
		case <-ctx.Done():
			return ExitInfo{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// SetInactivityTimeout sets how long the container may stay idle before
// it is put to sleep (its files are kept).
func (c *Container) SetInactivityTimeout(ctx context.Context, d time.Duration) error {
	if err := c.ready(); err != nil {
		return err
	}
	return c.compute.SetInactivityTimeout(ctx, c.name, d)
}

// SnapshotContainer captures the container's writable filesystem.
func (c *Container) SnapshotContainer(ctx context.Context, o SnapshotOptions) (SnapshotHandle, error) {
	if err := c.ready(); err != nil {
		return SnapshotHandle{}, err
	}
	var h SnapshotHandle
	err := c.journal.record(ctx, "container.snapshot", o, func(ctx context.Context) error {
		var err error
		h, err = c.compute.Snapshot(ctx, c.name, o)
		return err
	})
	return h, err
}

// Images returns the operator's named images, each pinned by digest.
func (c *Container) Images(ctx context.Context) (map[string]string, error) {
	if err := c.ready(); err != nil {
		return nil, err
	}
	return c.compute.Images(ctx)
}

// redactStart keeps env names but not values: env commonly carries secrets.
func redactStart(o StartOptions) StartOptions {
	if len(o.Env) > 0 {
		env := make(map[string]string, len(o.Env))
		for k := range o.Env {
			env[k] = "[redacted]"
		}
		o.Env = env
	}
	return o
}

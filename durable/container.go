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
//
// Starting a container that exists but sleeps wakes it with its files:
// Image must then be empty or the image it was created from, Snapshot
// must be nil (a snapshot starts afresh: the old files go), Env, Labels,
// Persist and Isolation keep their values from creation (an Isolation
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
	// nil keeps the container's policy (with Internet applied), or is
	// Internet alone for a new one. When set, its Internet wins.
	Network *api.NetworkPolicy `json:"network,omitempty"`
	// Isolation is api.IsolationRunc or api.IsolationGVisor; "" is the
	// platform's default. Chosen at creation.
	Isolation string `json:"isolation,omitempty"`
	// Persist is api.PersistDisk to copy the files off the host at every
	// sleep; "" is api.PersistNone. Chosen at creation.
	Persist string `json:"persist,omitempty"`
	// SleepAfter is the inactivity timeout (0: the platform's 10m) and
	// KeepAlive turns it off.
	SleepAfter time.Duration `json:"sleepAfter,omitempty"`
	KeepAlive  bool          `json:"keepAlive,omitempty"`
	// SelfSleep says the object puts the container to sleep itself
	// (Container.StopIfIdle from its alarm, on Status's LastActive): the
	// platform's own inactivity timer then leaves it running, and
	// SleepAfter and KeepAlive are only reported (api.Sandbox.SleepAt).
	SelfSleep bool `json:"selfSleep,omitempty"`
}

// StopOptions tune Compute.Stop.
type StopOptions struct {
	// Reason is journaled ("requested", "idle for 10m0s", …).
	Reason string
	// IdleSince, when set, makes the stop conditional: it does nothing if
	// the container had activity after IdleSince or has an operation in
	// flight (checked atomically with the stop, under the platform's lock).
	IdleSince time.Time
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
	// ExitCode is the exit code of the entrypoint (StartOptions.
	// Entrypoint) once it ended; nil when unknown or still running.
	ExitCode *int
	// LastActive is the last API activity on the container (exec, files,
	// terminals, starts); Busy says an operation is in flight now. An
	// object that sleeps its container itself (SelfSleep) decides on them.
	LastActive time.Time
	Busy       bool
	// Sandbox is the container's full public view (as GET
	// /v1/sandboxes/{name} shows it); zero when it does not exist.
	Sandbox api.Sandbox
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

// Compute is what the platform provides to run containers: name is a
// sandbox name. berth's is controller.Manager.Compute (runc containers,
// rootfs, network, the sandbox inventory); tests use fakes.
type Compute interface {
	Start(ctx context.Context, name string, o StartOptions) error
	Status(ctx context.Context, name string) (Status, error)
	Exec(ctx context.Context, name string, argv []string, o ExecOptions) (Process, error)
	Signal(ctx context.Context, name string, sig int) error
	// Stop stops a running container and keeps its files (it sleeps;
	// the next Start wakes it). It reports whether it stopped it: false
	// when it was not running or, with IdleSince, not idle.
	Stop(ctx context.Context, name string, o StopOptions) (bool, error)
	// Update changes the options of an existing container without
	// starting it, as a Start would (see StartOptions): the network
	// policy and SleepAfter/KeepAlive apply at once, the rest at the
	// next start.
	Update(ctx context.Context, name string, o StartOptions) error
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
	if c.addr.Class != BuiltinSandboxClass {
		// The built-in class's containers are the plain sandboxes users
		// asked for; others are marked with the class that runs them.
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels["berth.object.class"] = c.addr.Class
	}
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

// Status reports the container's state, its last activity and its full
// public view. A container that does not exist is Exists: false, not an
// error.
func (c *Container) Status(ctx context.Context) (Status, error) {
	if err := c.ready(); err != nil {
		return Status{}, err
	}
	return c.compute.Status(ctx, c.name)
}

// Describe returns the container's public view; not found when it does
// not exist.
func (c *Container) Describe(ctx context.Context) (api.Sandbox, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return api.Sandbox{}, err
	}
	if !st.Exists {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", c.name)
	}
	return st.Sandbox, nil
}

// Stop stops the container now and keeps its files: it sleeps, and the
// next Start (or any request to the sandbox) wakes it. Stopping a
// container that does not run does nothing; a missing one is not found.
func (c *Container) Stop(ctx context.Context, reason string) error {
	_, err := c.stop(ctx, StopOptions{Reason: reason})
	return err
}

// StopIfIdle is Stop on condition: only if the container had no activity
// after idleSince and no operation is in flight, checked atomically with
// the stop. It reports whether it stopped the container. An object's idle
// alarm uses it, so a request that arrives during the check is not cut off.
func (c *Container) StopIfIdle(ctx context.Context, reason string, idleSince time.Time) (bool, error) {
	if idleSince.IsZero() {
		return false, errdefs.InvalidArgument("StopIfIdle needs a time")
	}
	return c.stop(ctx, StopOptions{Reason: reason, IdleSince: idleSince})
}

func (c *Container) stop(ctx context.Context, o StopOptions) (bool, error) {
	if err := c.ready(); err != nil {
		return false, err
	}
	var stopped bool
	err := c.journal.record(ctx, "container.stop", map[string]string{"reason": o.Reason}, func(ctx context.Context) error {
		var err error
		stopped, err = c.compute.Stop(ctx, c.name, o)
		return err
	})
	return stopped, err
}

// Update changes the options of an existing container without starting
// it (see StartOptions for which apply when). Snapshot must be nil.
func (c *Container) Update(ctx context.Context, o StartOptions) error {
	if err := c.ready(); err != nil {
		return err
	}
	if o.Snapshot != nil {
		return errdefs.InvalidArgument("update: a snapshot is chosen at start")
	}
	return c.journal.record(ctx, "container.update", redactStart(o), func(ctx context.Context) error {
		return c.compute.Update(ctx, c.name, o)
	})
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
			if st.ExitCode != nil {
				info.ExitCode = *st.ExitCode
			}
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

// redactStart keeps env and injected header names but not their values:
// both commonly carry secrets.
func redactStart(o StartOptions) StartOptions {
	redact := func(m map[string]string) map[string]string {
		out := make(map[string]string, len(m))
		for k := range m {
			out[k] = "[redacted]"
		}
		return out
	}
	if len(o.Env) > 0 {
		o.Env = redact(o.Env)
	}
	if o.Network != nil && len(o.Network.Inject) > 0 {
		n := *o.Network
		n.Inject = make([]api.InjectRule, len(o.Network.Inject))
		for i, r := range o.Network.Inject {
			n.Inject[i] = api.InjectRule{Host: r.Host, SetHeaders: redact(r.SetHeaders)}
		}
		o.Network = &n
	}
	return o
}

package durable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
)

// The compute an object drives is a node (package node): these are
// node's types under the names durable's classes have always used, so a
// custom class compiles unchanged.
type (
	Resources       = node.Resources
	StartOptions    = node.StartOptions
	StopOptions     = node.StopOptions
	ExecOptions     = node.ExecOptions
	SnapshotOptions = node.SnapshotOptions
	SnapshotHandle  = node.SnapshotHandle
	ExitInfo        = node.ExitInfo
	Status          = node.Status
	Process         = node.Process
)

// Compute is what the platform provides to run containers: a node.Node
// (name is a sandbox name). berth's is the single host's node
// (node/local's Manager.Compute); tests use fakes.
type Compute = node.Node

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
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
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

package local

import (
	"context"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Controllers is the control plane's side of this node's sandboxes, as the
// node calls back into it: each sandbox's controller object (the Sandbox
// class of package controller, on package durable's host). The daemon
// attaches controller.Attach's *controller.Objects (AttachControllers);
// this package does not import the control plane.
//
// The lifecycle half of control.Sandboxes is the control plane's
// (control.Plane), which reaches this Manager only as its node.Node
// (compute.go). What is still node-local and needs the objects (Fork's
// sandboxes, a wake for a durable exec, a spec refresh after a network
// change, the journal) goes through Controllers. Callers must not be
// inside a call on the sandbox's object.
type Controllers interface {
	// Create creates the sandbox through its controller object, strictly:
	// an existing one is already exists.
	Create(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	// Destroy destroys the sandbox through its controller object.
	Destroy(ctx context.Context, name string) error
	// Wake wakes a sleeping sandbox through its controller object, which
	// chooses how it starts and arms its idle alarm.
	Wake(ctx context.Context, name string) error
	// Refresh has the controller object record what the node now has,
	// after a change that did not come through the object.
	Refresh(ctx context.Context, name string) error
	// Journal records op in the sandbox's journal (the object's: same
	// table and stream as its own entries, with status and timestamps).
	Journal(ctx context.Context, name, op, detail string) error
}

// AttachControllers hands the Manager its sandboxes' controller objects,
// whose node must be this Manager's (Compute). Call it before Reconcile;
// the object host delivers their idle alarms (durable.Host.Run). Without
// it the Manager runs alone: its own journal and idle timer, and the
// calls that need an object (Fork, a durable exec's wake) fail.
func (m *Manager) AttachControllers(c Controllers) {
	m.objects = c
}

// createAsObject is a strict create through the sandbox's controller
// object (Fork's sandboxes).
func (m *Manager) createAsObject(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if err := ValidName(req.Name); err != nil {
		return api.Sandbox{}, err
	}
	if m.objects == nil {
		return api.Sandbox{}, errNoControllers()
	}
	return m.objects.Create(ctx, req)
}

// destroyAsObject destroys the sandbox through its controller object.
func (m *Manager) destroyAsObject(ctx context.Context, name string) error {
	if _, err := m.describe(ctx, name); err != nil {
		return err
	}
	if m.objects == nil {
		return errNoControllers()
	}
	return m.objects.Destroy(ctx, name)
}

// wake wakes a sleeping sandbox through its controller object, for a
// request (exec, files, …) that needs it running. Callers must not be
// inside a call on that object.
func (m *Manager) wake(ctx context.Context, name string) error {
	if m.objects == nil {
		return errNoControllers()
	}
	return m.objects.Wake(ctx, name)
}

// refreshSpec has the sandbox's controller object record what the compute
// now has, after a change that did not come through the object. Callers
// must not be inside a call on that object.
func (m *Manager) refreshSpec(ctx context.Context, name string) {
	if m.objects == nil {
		return
	}
	if err := m.objects.Refresh(ctx, name); err != nil {
		m.cfg.Logf("sandbox %s: record its spec: %v", name, err)
	}
}

func errNoControllers() error {
	return errdefs.FailedPrecondition("the sandbox controller has no object host (call AttachControllers)")
}

package local

import (
	"context"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
)

// SandboxClass is the durable-object class of the built-in sandbox
// controller: object (Sandbox, name) is the controller of sandbox name.
const SandboxClass = controller.Class

// The lifecycle half of control.Sandboxes is the control plane's
// (control.Plane): calls on each sandbox's controller object (package
// controller, a class on package durable's public API), which reaches
// this Manager only as its node.Node (compute.go). What is still
// node-local and needs the objects (Fork's sandboxes, a wake for a
// durable exec, a spec refresh after a network change) goes through
// them here too.

// createAsObject is a strict create through the sandbox's controller
// object (Fork's sandboxes).
func (m *Manager) createAsObject(ctx context.Context, req api.CreateSandboxRequest) (sb api.Sandbox, err error) {
	if err := ValidName(req.Name); err != nil {
		return api.Sandbox{}, err
	}
	err = m.asObject(ctx, req.Name, func(o *controller.Sandbox) error {
		res, err := o.GetOrCreate(ctx, controller.CreateArgs{Request: req, CreateOnly: true})
		sb = res.Sandbox
		return err
	})
	return sb, err
}

// destroyAsObject destroys the sandbox through its controller object.
func (m *Manager) destroyAsObject(ctx context.Context, name string) error {
	if _, err := m.describe(ctx, name); err != nil {
		return err
	}
	return m.asObject(ctx, name, func(o *controller.Sandbox) error { return o.Destroy(ctx) })
}

// wake wakes a sleeping sandbox through its controller object, for a
// request (exec, files, …) that needs it running. Callers must not be
// inside a call on that object.
func (m *Manager) wake(ctx context.Context, name string) error {
	return m.asObject(ctx, name, func(o *controller.Sandbox) error {
		_, err := o.Wake(ctx)
		return err
	})
}

// refreshSpec has the sandbox's controller object record what the compute
// now has, after a change that did not come through the object. Callers
// must not be inside a call on that object.
func (m *Manager) refreshSpec(ctx context.Context, name string) {
	if m.objects == nil {
		return
	}
	err := m.asObject(ctx, name, func(o *controller.Sandbox) error {
		_, err := o.Refresh(ctx)
		return err
	})
	if err != nil {
		m.cfg.Logf("sandbox %s: record its spec: %v", name, err)
	}
}

func (m *Manager) asObject(ctx context.Context, name string, fn func(*controller.Sandbox) error) error {
	if m.objects == nil {
		return errdefs.FailedPrecondition("the sandbox controller has no object host (call AttachObjects)")
	}
	return m.objects.DoAs(ctx, durable.Address{Class: SandboxClass, ID: name}, func(obj any, _ *durable.State) error {
		return fn(obj.(*controller.Sandbox))
	})
}

// AttachObjects registers the built-in controller (package controller)
// as class Sandbox on h, whose Compute must be this Manager's (Compute).
// Call it before Reconcile; h.Run then delivers the idle alarms.
func (m *Manager) AttachObjects(h *durable.Host) error {
	if err := controller.Register(h, controller.Options{Now: m.classNow}); err != nil {
		return err
	}
	m.objects, m.ownHost = h, false
	return nil
}

// classNow is the clock the class decides idle sleep by (tests move it).
func (m *Manager) classNow() time.Time {
	if m.now != nil {
		return m.now()
	}
	return time.Now()
}

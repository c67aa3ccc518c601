package controller

import (
	"context"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller/sandboxclass"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
)

// SandboxClass is the durable-object class of the built-in sandbox
// controller: object (Sandbox, name) is the controller of sandbox name.
const SandboxClass = sandboxclass.Class

// The lifecycle half of server.Sandboxes runs as calls on the sandbox's
// controller object (package sandboxclass, a class on package durable's
// public API): HTTP, CLI, E2B and RPC (POST /v1/objects/Sandbox/{name}/…)
// share that one path. The object decides; it reaches this Manager only
// as its durable.Compute (compute.go).

// GetOrCreate implements server.Sandboxes.
func (m *Manager) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (sb api.Sandbox, created bool, err error) {
	if err := ValidName(req.Name); err != nil {
		return api.Sandbox{}, false, err
	}
	err = m.asObject(ctx, req.Name, func(o *sandboxclass.Sandbox) error {
		res, err := o.GetOrCreate(ctx, sandboxclass.CreateArgs{Request: req, CreateOnly: createOnly})
		sb, created = res.Sandbox, res.Created
		return err
	})
	return sb, created, err
}

// Get implements server.Sandboxes. It never wakes the sandbox.
func (m *Manager) Get(ctx context.Context, name string) (sb api.Sandbox, err error) {
	if err := ValidName(name); err != nil {
		return api.Sandbox{}, err
	}
	if m.objects == nil {
		return m.describe(ctx, name)
	}
	if err := m.mustExist(ctx, name); err != nil {
		return api.Sandbox{}, err
	}
	err = m.asObject(ctx, name, func(o *sandboxclass.Sandbox) error {
		sb, err = o.Get(ctx)
		return err
	})
	return sb, err
}

// Destroy implements server.Sandboxes: it removes the container, network,
// writable layer and record. Destroying a missing sandbox is not found.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := m.mustExist(ctx, name); err != nil {
		return err
	}
	return m.asObject(ctx, name, func(o *sandboxclass.Sandbox) error { return o.Destroy(ctx) })
}

// mustExist answers not found for a name with no sandbox before any
// controller object is made for it: a stream of requests for made-up
// names must not fill the object host with live instances.
func (m *Manager) mustExist(ctx context.Context, name string) error {
	_, err := m.describe(ctx, name)
	return err
}

// Sleep implements server.Sandboxes.
func (m *Manager) Sleep(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if err := m.mustExist(ctx, name); err != nil {
		return err
	}
	return m.asObject(ctx, name, func(o *sandboxclass.Sandbox) error { return o.Sleep(ctx) })
}

// wake wakes a sleeping sandbox through its controller object, for a
// request (exec, files, …) that needs it running. Callers must not be
// inside a call on that object.
func (m *Manager) wake(ctx context.Context, name string) error {
	return m.asObject(ctx, name, func(o *sandboxclass.Sandbox) error {
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
	err := m.asObject(ctx, name, func(o *sandboxclass.Sandbox) error {
		_, err := o.Refresh(ctx)
		return err
	})
	if err != nil {
		m.cfg.Logf("sandbox %s: record its spec: %v", name, err)
	}
}

func (m *Manager) asObject(ctx context.Context, name string, fn func(*sandboxclass.Sandbox) error) error {
	if m.objects == nil {
		return errdefs.FailedPrecondition("the sandbox controller has no object host (call AttachObjects)")
	}
	return m.objects.DoAs(ctx, durable.Address{Class: SandboxClass, ID: name}, func(obj any, _ *durable.State) error {
		return fn(obj.(*sandboxclass.Sandbox))
	})
}

// AttachObjects registers the built-in controller (package sandboxclass)
// as class Sandbox on h, whose Compute must be this Manager's (Compute).
// Call it before Reconcile; h.Run then delivers the idle alarms.
func (m *Manager) AttachObjects(h *durable.Host) error {
	if err := sandboxclass.Register(h, sandboxclass.Options{Now: m.classNow}); err != nil {
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

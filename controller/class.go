package controller

import (
	"context"
	"errors"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
)

// SandboxClass is the durable-object class of the built-in sandbox
// controller: object (Sandbox, name) is the controller of sandbox name.
const SandboxClass = durable.BuiltinSandboxClass

// sandboxObject is the built-in controller seen through package durable.
// Its persisted sleepAfter alarm is a durable alarm (delivered at least
// once, also after a restart, which is why the handler re-checks idleness
// under the actor lock), and its methods are callable over RPC like any
// class's: POST /v1/objects/Sandbox/{name}/Get.
type sandboxObject struct {
	m    *Manager
	name string
}

// Alarm sleeps the sandbox if it is idle past its deadline; a stale or
// duplicate delivery does nothing.
func (o *sandboxObject) Alarm(ctx context.Context, info durable.AlarmInfo) error {
	o.m.maybeSleep(ctx, o.name, time.Now())
	return nil
}

// Get returns the sandbox without waking it.
func (o *sandboxObject) Get(ctx context.Context) (api.Sandbox, error) { return o.m.Get(ctx, o.name) }

// Sleep stops the sandbox's compute, keeping its files.
func (o *sandboxObject) Sleep(ctx context.Context) error { return o.m.sleepNamed(ctx, o.name) }

// Wake starts an existing sandbox if it sleeps (it never creates one).
func (o *sandboxObject) Wake(ctx context.Context) (api.Sandbox, error) {
	if _, err := o.m.Get(ctx, o.name); err != nil {
		return api.Sandbox{}, err
	}
	sb, _, err := o.m.getOrCreate(ctx, api.CreateSandboxRequest{Name: o.name}, false)
	return sb, err
}

// The lifecycle operations of server.Sandboxes run as calls on the
// sandbox's controller object when a durable host is attached: one live
// instance per name, calls serialized by package durable (the actor lock
// inside stays, for exec and files, which do not go through the object).
// Methods of sandboxObject call the unwrapped bodies: an object's call
// must not call itself.

// GetOrCreate implements server.Sandboxes.
func (m *Manager) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (sb api.Sandbox, created bool, err error) {
	if err := ValidName(req.Name); err != nil {
		return api.Sandbox{}, false, err
	}
	err = m.asObject(ctx, req.Name, func() error {
		var err error
		sb, created, err = m.getOrCreate(ctx, req, createOnly)
		return err
	})
	return sb, created, err
}

// Destroy implements server.Sandboxes: it removes the container, network,
// writable layer and record. Destroying a missing sandbox is not found.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	return m.asObject(ctx, name, func() error { return m.destroy(ctx, name) })
}

// Sleep implements server.Sandboxes.
func (m *Manager) Sleep(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	return m.asObject(ctx, name, func() error { return m.sleepNamed(ctx, name) })
}

func (m *Manager) asObject(ctx context.Context, name string, fn func() error) error {
	if m.objects == nil {
		return fn()
	}
	return m.objects.DoAs(ctx, durable.Address{Class: SandboxClass, ID: name}, func(any, *durable.State) error { return fn() })
}

// AttachObjects registers the built-in controller as class Sandbox on h
// and moves its persisted sleepAfter alarms onto h's durable alarms. Call
// it before Reconcile; h.Run then delivers the alarms.
func (m *Manager) AttachObjects(h *durable.Host) error {
	err := h.Register(SandboxClass, (*sandboxObject)(nil), func(st *durable.State) (any, error) {
		return &sandboxObject{m: m, name: st.Address.ID}, nil
	})
	if err != nil {
		return err
	}
	m.objects = h
	return nil
}

// armAlarm makes the durable alarm of sandbox name match at (zero: none).
func (m *Manager) armAlarm(ctx context.Context, name string, at time.Time) error {
	if m.objects == nil {
		return nil
	}
	st, err := m.objects.StateOf(durable.Address{Class: SandboxClass, ID: name})
	if err != nil {
		return err
	}
	if at.IsZero() {
		return st.DeleteAlarm(ctx)
	}
	return st.SetAlarm(ctx, at)
}

// armAll re-arms every record's alarm from the record (after a restart: a
// crash between persisting a record and its alarm, or records written
// before alarms moved to package durable).
func (m *Manager) armAll(ctx context.Context) {
	recs, err := m.st.List(ctx)
	if err != nil {
		m.cfg.Logf("alarms: %v", err)
		return
	}
	for _, r := range recs {
		if err := m.armAlarm(ctx, r.Name, r.SleepAt); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.cfg.Logf("sandbox %s: arm alarm: %v", r.Name, err)
		}
	}
}

package controller

import (
	"context"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
)

// Objects is the class's objects on one durable host, as a node calls
// back into them for what starts on the node but is the controller's to
// decide: a fork's new sandboxes, a wake for a request that needs the
// sandbox running, a spec refresh after a change made on the node, and
// the sandbox's journal. It has the methods of node/local's Controllers
// (the daemon hands it to Manager.AttachControllers); this package does
// not import node/local, and cannot: node/local's tests import this one.
type Objects struct{ h *durable.Host }

// Attach registers the class on h (Register) and returns its objects
// there. h's Compute must be the node that calls back into them.
func Attach(h *durable.Host, o Options) (*Objects, error) {
	if err := Register(h, o); err != nil {
		return nil, err
	}
	return &Objects{h: h}, nil
}

// Host is the durable host the objects live on.
func (o *Objects) Host() *durable.Host { return o.h }

func (o *Objects) do(ctx context.Context, name string, fn func(*Sandbox) error) error {
	return o.h.DoAs(ctx, durable.Address{Class: Class, ID: name}, func(obj any, _ *durable.State) error {
		return fn(obj.(*Sandbox))
	})
}

// Create creates the sandbox through its object, strictly: an existing
// one is already exists.
func (o *Objects) Create(ctx context.Context, req api.CreateSandboxRequest) (sb api.Sandbox, err error) {
	err = o.do(ctx, req.Name, func(s *Sandbox) error {
		res, err := s.GetOrCreate(ctx, CreateArgs{Request: req, CreateOnly: true})
		sb = res.Sandbox
		return err
	})
	return sb, err
}

// Destroy destroys the sandbox through its object.
func (o *Objects) Destroy(ctx context.Context, name string) error {
	return o.do(ctx, name, func(s *Sandbox) error { return s.Destroy(ctx) })
}

// Wake wakes a sleeping sandbox through its object (Sandbox.Wake).
func (o *Objects) Wake(ctx context.Context, name string) error {
	return o.do(ctx, name, func(s *Sandbox) error {
		_, err := s.Wake(ctx)
		return err
	})
}

// Refresh has the object record the spec as the node now has it
// (Sandbox.Refresh).
func (o *Objects) Refresh(ctx context.Context, name string) error {
	return o.do(ctx, name, func(s *Sandbox) error {
		_, err := s.Refresh(ctx)
		return err
	})
}

// Journal records op in the object's journal (durable.State.Record):
// the sandbox's journal, with status and timestamps.
func (o *Objects) Journal(ctx context.Context, name, op, detail string) error {
	st, err := o.h.StateOf(durable.Address{Class: Class, ID: name})
	if err != nil {
		return err
	}
	return st.Record(ctx, op, detail, nil, nil)
}

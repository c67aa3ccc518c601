// Package durable is berth's programmable controller API: durable objects.
//
// An object class is a Go type registered under a name with a constructor.
// An instance is addressed by (class, id); exactly one live instance exists
// per address on a daemon, calls to one instance are serialized and calls
// to different instances run concurrently. Each instance gets a *State
// (the reference platform's ctx): transactional key-value Storage in the
// state store, one persisted alarm, a Container that drives this object's
// compute (a berth sandbox), and an idempotent journal (State.Do).
//
// Exported methods of the form
//
//	func (o *T) Method(ctx context.Context[, args A]) ([R, ]error)
//
// are callable over HTTP (POST /v1/objects/{class}/{id}/{method}, JSON in
// and out) through Host.Call. A method named Alarm with the signature
// func(context.Context, AlarmInfo) error receives alarms and is not
// callable over RPC.
//
// The package knows nothing of how compute is run: the daemon supplies a
// Compute, a node.Node (node/local's Manager.Compute), tests a fake.
// berth's own sandbox controller is a class on this API (package
// controller). See docs/CONTROLLERS.md.
package durable

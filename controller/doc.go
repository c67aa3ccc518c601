// Package controller owns berth's sandboxes. Their controllers are
// objects of class Sandbox (package sandboxclass, on package durable's
// public API), which decide; this package is the compute they drive
// (Manager.Compute, a durable.Compute): one "actor" per sandbox name that
// serializes operations on it, persists every state change in the state
// store before acting on it, drives rootfs, network, OCI runtime and
// agent, keeps the inventory, and reconciles the host against the store
// after a restart, including after kill -9. Manager also serves
// server.Backend; its lifecycle calls go through the Sandbox objects.
//
// Lifecycle truth lives in the store, not in the container: a container may
// vanish at any time and the controller will start a new one from the
// same writable layer on the next request.
package controller

// Package local is this machine's node: the node.Node that the
// single-host daemon uses in-process (Manager.Compute). It runs the
// sandboxes its controllers decide on: one "actor" per sandbox name that
// serializes operations on it, persists every state change in the state
// store before acting on it, drives rootfs, network, OCI runtime and
// agent, allocates user namespaces, captures and restores snapshots and
// backups, keeps the inventory, and reconciles the host against the
// store after a restart, including after kill -9.
//
// The decisions are not made here: each sandbox's controller is an object
// of class Sandbox (package controller, on package durable's public API),
// which reaches this package only through node.Node. This package imports
// nothing above the node (docs/layers.txt): what it needs from the control
// plane it names in interfaces of its own, which the daemon fills —
// Controllers (the controller objects, for fork, wake, spec refresh and
// the journal) and Policy (the operator policy) — and the data it shares
// with the layers above sits in leaves (internal/tenant: the caller's
// tenant; internal/exposure: exposed ports and their tokens).
//
// Lifecycle truth lives in the store, not in the container: a container may
// vanish at any time and the node will start a new one from the
// same writable layer on the next request.
package local

// Package controller owns berth's sandboxes: one durable controller (an
// "actor") per sandbox name. It serializes lifecycle operations on a name,
// persists every state change in the state store before acting on it,
// drives the compute (rootfs, network, OCI runtime, agent), fires the
// sleepAfter alarm, and reconciles the host against the store after a
// restart, including after kill -9.
//
// Lifecycle truth lives in the store, not in the container: a container may
// vanish at any time and the controller will start a new one from the
// same writable layer on the next request.
package controller

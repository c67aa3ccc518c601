// Package controller is berth's built-in sandbox controller, written as
// a class on package durable's public API, the same API third-party
// controllers use: object (Sandbox, name) controls sandbox name through
// its *durable.State only — its Storage holds the controller's spec of
// the sandbox, its alarm puts the sandbox to sleep when idle, and
// st.Container starts, stops, updates and destroys it on the node.
//
// The node calls back into the objects for what starts there but is the
// controller's to decide (a fork's sandboxes, the wake before a durable
// exec, a spec refresh, the journal): Attach registers the class and
// returns Objects, which the daemon hands to node/local as its
// Controllers. This package imports nothing of the node's implementation
// (package node/local), and cannot: node/local's tests import this one,
// so such an import would be a cycle.
package controller

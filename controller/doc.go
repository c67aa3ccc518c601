// Package controller is berth's built-in sandbox controller, written as
// a class on package durable's public API, the same API third-party
// controllers use: object (Sandbox, name) controls sandbox name through
// its *durable.State only — its Storage holds the controller's spec of
// the sandbox, its alarm puts the sandbox to sleep when idle, and
// st.Container starts, stops, updates and destroys it on the node. It
// imports nothing of the node's implementation (package node/local),
// which the compiler checks: this package cannot reach it.
package controller

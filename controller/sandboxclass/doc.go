// Package sandboxclass is berth's built-in sandbox controller written as
// a class on package durable's public API, the same API third-party
// controllers use: object (Sandbox, name) controls sandbox name through
// its *durable.State only — its Storage holds the controller's spec of
// the sandbox, its alarm puts the sandbox to sleep when idle, and
// st.Container starts, stops, updates and destroys the compute. It
// imports nothing of the compute's implementation (package controller),
// which the compiler checks: this package cannot reach it.
package sandboxclass

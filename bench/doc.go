// Package bench implements `berth bench`: it measures time to interactive,
// exec round trip and wake latency through the public API, and runs the
// same work with raw `runc run` (and `docker` where an engine answers) in
// the same process, so every figure stands beside a baseline as a ratio.
// RunTask (--task) measures app-ready of a generated Node + Python
// workspace instead: shell, deps and dev server through its preview URL.
// The sleep-tier scenario (--sleep-tiers, sleep.go) puts the freeze tier's
// freeze and thaw beside the stop tier's sleep and wake in the same run.
package bench

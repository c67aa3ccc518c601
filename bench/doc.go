// Package bench implements `berth bench`: it measures time to interactive,
// exec round trip and wake latency through the public API, and runs the
// same work with raw `runc run` (and `docker` where an engine answers) in
// the same process, so every figure stands beside a baseline as a ratio.
package bench

// Package forward is the agent's port tunnel.
//
// GET /v1/forward?port=N with "Connection: Upgrade" and
// "Upgrade: berth-tcp" makes the agent dial 127.0.0.1:N (then [::1]:N)
// from inside the sandbox and, on success, answer 101 Switching Protocols
// and relay bytes both ways on the same connection until either side
// closes. The host's preview proxy uses it so that services bound to
// loopback inside the sandbox are reachable, and so that preview URLs work
// with the sandbox's networking off: the bytes travel over the agent's
// unix socket, not over the sandbox's network.
//
// Only loopback is ever dialed: the agent must not become a way for the
// host (or whoever drives it) to reach other addresses from the sandbox's
// network namespace.
package forward

// Package daemon wires berth's parts into the `berth serve` process: state
// store, image store, rootfs, network, OCI runtime, this machine's node
// (node/local), the durable object host, the control plane
// (control.Plane) and the HTTP faces. It holds no logic of its own beyond
// start-up and shutdown, and the small adapters that fit each part to
// node/local's interfaces.
package daemon

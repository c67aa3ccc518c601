// Package daemon wires berth's parts into the `berth serve` process: state
// store, image store, rootfs, network, OCI runtime, controller and HTTP
// server. It holds no logic of its own beyond start-up and shutdown, and
// the small adapters that fit each part to the controller's interfaces.
package daemon

// Package testdaemon starts a real `berth serve` for the suites under
// test/ (integration, adversarial, E2B compatibility) and makes sure the
// default image is current. Each suite passes its own bridge, subnet, run
// dir, data dir and user-namespace id base, so suites and checkouts on one
// machine never share a resource; ports are picked free on loopback.
package testdaemon

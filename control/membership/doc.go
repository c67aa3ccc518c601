// Package membership keeps this process's entry in the cluster's
// membership and reads everyone's: the heartbeat loop (Loop) that writes
// the node's store.Node on start and every interval, the one liveness
// rule (Alive: a node is alive while the store's now minus its last
// heartbeat is within the stale bound), the flag rules for a node's name,
// roles and labels, and Directory, which shows the entries to the API
// (control.Nodes: list, get, drain, undrain) with their health.
//
// The entry is the node's own claim, built from node.Node's Info: the
// loop only converts units and adds what the process knows of itself
// (name, address, roles, labels, start time). A heartbeat that fails is
// logged with backoff and retried; it is never fatal, and it runs on its
// own goroutine, so a slow store delays no API request.
package membership

// Package control is berth's control plane: the part that decides. It
// holds the contracts the API faces consume (package server, the native
// HTTP API, and package e2b), in domain terms with no HTTP in them, and
// Plane, which implements them over the durable objects (each sandbox's
// controller, class Sandbox of package controller), the state store and
// a node.Node.
//
// Plane owns sandboxes by name (get-or-create, get, destroy and sleep as
// calls on their controller objects; the labels write; the inventory
// listed from the store) and the "wake, then use the agent" path behind
// exec, files and AgentAccess: it reaches the node only through
// node.Node (Agent; a sandbox that does not run is woken by its object,
// whose Start is the node's).
//
// Still node-local; moves in issue 14 (control.NodeLocal, implemented by
// node/local's Manager, because they need the node's internals):
//   - snapshots, fork and backups (the writable layer, the blob store,
//     the layer cache; Fork creates its sandboxes through the objects
//     from inside the node);
//   - preview ports (the agent tunnel, the preview proxy's revocation);
//   - egress policy, the egress log and secrets (the proxy's state);
//   - the labels write (the record under the node's actor lock; Plane
//     then has the object refresh its spec).
//
// Also still node-local: node/local imports package controller and
// durable for Fork's creates, the wake behind a durable Container.Exec,
// and the spec refresh after a network change.
package control

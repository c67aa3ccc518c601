// Package node is the boundary between berth's control plane and one
// machine that runs sandboxes: the Node interface and the plain data that
// crosses it. The control plane (the API faces, the durable objects and
// their sandbox controllers) decides; a Node carries the decisions out on
// its own machine (OCI runtime, rootfs, network, the in-sandbox agent) and
// reports what it holds.
//
// A Node is in the same process (package node/local, the single-host
// daemon) or across the network (package node/remote, which speaks this
// interface over HTTP with a cluster credential). Package node/nodetest is
// the conformance suite both run.
//
// This package holds no machinery and imports nothing of berth's beyond
// api, agentclient and errdefs: it is the contract, and it must stay small.
package node

// Package nodetest is the conformance suite of the node.Node contract and
// a fake node that passes it.
//
// Run checks one implementation: start, stop and wake keep the files
// (written and read back through Agent), Status of a missing sandbox,
// Destroy then not found, Exec streams while it runs and returns codes,
// Kill ends an exec, Agent on a stopped sandbox fails without waking it,
// Info reports. The same suite runs against the fake in-process, against
// the fake through node/remote over loopback, and (integration tier)
// against the real node in-process and through remote, so the fakes the
// control plane's tests use are held to the real node's behaviour.
//
// Fake is an in-memory node.Node whose execs are host processes and whose
// agents, when the caller supplies them (agent/agenttest), are real ones;
// it has no machinery and needs no root. This package does not import the
// agent itself, so the suite links only what node does.
package nodetest

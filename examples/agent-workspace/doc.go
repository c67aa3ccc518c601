// Command agent-workspace is a program that embeds berth and registers
// one durable-object class, AgentSandbox: an agent's workspace whose image
// and size are chosen at run time (toolchain, workload, a pinned image, a
// canary), which it can save as a snapshot and restore later. It serves
// berth's whole API plus the class's methods at
// POST /v1/objects/AgentSandbox/{id}/{method}. docs/CONTROLLERS.md walks
// through it.
//
//	agent-workspace --listen 127.0.0.1:7070 --data /var/lib/berth
//	berth call AgentSandbox ws1 StartWorkspace '{"toolchain":"python","workload":"build"}'
//
// Its integration test is TestAgentWorkspaceExample in test/integration.
package main

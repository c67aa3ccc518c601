// Package remote speaks node.Node over the network: NewHandler serves a
// node (the node's side) and Client is a node.Node that calls one (the
// control plane's side). It is plain HTTP/1.1 and JSON, so cluster mode
// (issue 14) can put TLS, placement and a registry of nodes around it
// without a new wire format.
//
// # Credential
//
// Every request carries "Authorization: Bearer <token>", a cluster
// credential shared by the control plane and its nodes. It is not a user
// API key: it grants the whole node, and user keys never reach a node. The
// handler compares it in constant time; a missing or wrong token is 401
// with an error envelope, and an empty configured token refuses everything.
//
// # Routes
//
// All under Prefix (/node/v1); {name} is a sandbox name, checked with
// api.ValidateSandboxName before anything runs. Request bodies are JSON and
// bounded (1 MiB; an exec 80 MiB, for its stdin); malformed JSON is 400.
//
//	GET  /sandboxes/{name}                     → node.Status
//	POST /sandboxes/{name}/start               node.StartOptions → 204
//	POST /sandboxes/{name}/update              node.StartOptions → 204
//	POST /sandboxes/{name}/stop                node.StopOptions → {"stopped":bool}
//	POST /sandboxes/{name}/destroy             {"reason":…} → 204
//	POST /sandboxes/{name}/signal              {"signal":n} → 204
//	PUT  /sandboxes/{name}/inactivity-timeout  {"timeout":ns} → 204
//	POST /sandboxes/{name}/snapshot            node.SnapshotOptions → node.SnapshotHandle
//	POST /sandboxes/{name}/exec                {"argv":[…],"options":node.ExecOptions} → frames
//	GET  /sandboxes/{name}/agent               Upgrade: berth-node-agent/1 → 101, then bytes
//	GET  /images                               → {"name":"digest",…}
//	GET  /info                                 → node.Info
//
// Durations are JSON numbers of nanoseconds (Go's time.Duration).
//
// # Errors
//
// A failed call answers the status api.HTTPStatus gives its error and the
// envelope api.Error, {"code":"not_found","message":"sandbox \"x\" not
// found"}. The client rebuilds the errdefs kind from the code
// (errdefs.FromCode: an unknown code is internal), so errors.Is(err,
// errdefs.ErrNotFound) holds on the control plane as on the node. An
// answer without an envelope (a proxy's page) is unavailable.
//
// # Exec
//
// An accepted exec answers 200 with Content-Type ExecContentType and a
// stream of frames, each flushed as written: one type byte, a big-endian
// uint32 payload length (at most 1 MiB), the payload. Types: 1 stdout
// bytes, 2 stderr bytes, 4 heartbeat (empty; every 5 s, and after 20 ms
// when nothing else was sent yet, so the head leaves and Exec returns; a
// short command's whole answer is one write), and 3 exit, last, whose
// payload is {"code":n} or {"code":-1,"error":api.Error} when the node's
// Wait failed. Output is not buffered on the node: a line the command
// prints leaves at once. The exit frame is the one frame not flushed on
// its own: it leaves with the chunked body's end in one write, and the
// client reads that end (waiting at most 100 ms for it) before Wait
// returns, so the connection goes back to the pool; an answer closed
// before its end costs the connection, and on loopback a new TCP
// connection per exec was most of what an exec through this package
// added. The request is the process's owner: when it ends
// early (the client's Kill, its context, a lost connection) the node kills
// the process. A stream silent for 20 s is taken for a dead node.
//
// # Agent tunnel
//
// GET …/agent with "Connection: Upgrade" and "Upgrade: berth-node-agent/1"
// takes the sandbox's agent (node.Node.Agent, which never wakes a sleeping
// sandbox: a stopped one fails here with its error envelope), opens one
// connection to it with the agent client's own pinned dialer, answers 101
// and splices the two both ways, half-closes included. The agent protocol
// runs through it unchanged and unbuffered (files, PTY, processes,
// sessions, port forwards). The sandbox counts as busy while the tunnel is
// open. On the client, Agent opens the first tunnel at once, so its error
// is Agent's, and returns agentclient.NewDialer over further tunnels; the
// peer is still the untrusted agent, so agentclient's bounds apply as they
// do locally. release closes the pooled tunnels.
package remote

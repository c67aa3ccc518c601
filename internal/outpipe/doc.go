// Package outpipe is the in-memory pipe that carries a process's output
// from whatever produces it to a reader that may come late: its writer
// never blocks, so a reader can take stdout to its end before stderr, or
// only wait for the exit. Every node.Process implementation (node/local,
// node/remote, node/nodetest) buffers its streams in one.
package outpipe

// Package agenttest starts an in-process agent server on a temporary unix
// socket for tests of the agent and of its host-side clients. The agent runs
// as an ordinary goroutine (not PID 1) with its own fake /etc/passwd and
// /etc/group, so tests control users and home directories.
package agenttest

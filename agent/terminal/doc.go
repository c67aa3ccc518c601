// Package terminal is the agent's terminals: a shell on a pty per terminal
// id, with output kept in a bounded scrollback and broadcast to every
// attached WebSocket (ws.go). It is the only part of berth that links
// creack/pty.
//
// Shells are resolved and started by the agent (Config): the agent is PID 1
// and every child goes through its reaper.
package terminal

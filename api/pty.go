package api

import "time"

// CreateTerminalRequest creates a terminal: a shell on its own pty, with its
// own cwd and environment. Several terminals may run in one sandbox.
type CreateTerminalRequest struct {
	// ID names the terminal ([A-Za-z0-9_.-], 1–128 bytes); generated when
	// empty.
	ID    string `json:"id,omitempty"`
	Cols  int    `json:"cols,omitempty"`  // default 80
	Rows  int    `json:"rows,omitempty"`  // default 24
	Shell string `json:"shell,omitempty"` // default /bin/bash, else /bin/sh
	Cwd   string `json:"cwd,omitempty"`   // default: the user's home
	Env   Env    `json:"env,omitempty"`   // TERM defaults to xterm-256color; null unsets
	User  string `json:"user,omitempty"`  // default: the agent's default user
}

// Terminal describes one terminal. Exit is set once its shell has exited;
// the terminal (and its scrollback) stays until it is deleted or recreated.
type Terminal struct {
	ID              string      `json:"id"`
	Shell           string      `json:"shell"`
	Cwd             string      `json:"cwd"`
	User            string      `json:"user"`
	Pid             int         `json:"pid"`
	Cols            int         `json:"cols"`
	Rows            int         `json:"rows"`
	Running         bool        `json:"running"`
	Exit            *ExitStatus `json:"exit,omitempty"`
	Clients         int         `json:"clients"`
	ScrollbackBytes int         `json:"scrollbackBytes"`
	CreatedAt       time.Time   `json:"createdAt"`
}

// TerminalList is the body of GET /v1/terminals.
type TerminalList struct {
	Terminals []Terminal `json:"terminals"`
}

// Terminal WebSocket control message types (JSON text frames). Binary frames
// carry terminal bytes in both directions.
const (
	TerminalResize = "resize" // client → server: Cols, Rows
	TerminalReady  = "ready"  // server → client: attached; scrollback follows
	TerminalExit   = "exit"   // server → client: Code, Signal
	TerminalError  = "error"  // server → client: Message
)

// TerminalControl is one JSON text frame on a terminal WebSocket.
type TerminalControl struct {
	Type    string `json:"type"`
	Cols    int    `json:"cols,omitempty"`
	Rows    int    `json:"rows,omitempty"`
	Code    *int   `json:"code,omitempty"`
	Signal  string `json:"signal,omitempty"`
	Message string `json:"message,omitempty"`
}

// Watch stream message types. A watch stream is newline-delimited JSON
// WatchEvents: first one "watching" (sent only once every inotify watch is in
// place), then any number of "event", "heartbeat" (while idle) and "error"
// (non-fatal, e.g. the kernel queue overflowed and events were lost), ending
// with "stopped" when the watched path itself goes away or the agent shuts
// down.
const (
	WatchWatching  = "watching"
	WatchEventType = "event"
	WatchHeartbeat = "heartbeat"
	WatchErrorType = "error"
	WatchStopped   = "stopped"
)

// File event kinds, in WatchEvent.EventType. A rename inside the watched
// tree yields a move_from and a move_to with the same Cookie.
const (
	FileCreate   = "create"
	FileModify   = "modify"
	FileDelete   = "delete"
	FileMoveFrom = "move_from"
	FileMoveTo   = "move_to"
	FileAttrib   = "attrib"
)

// WatchEvent is one line of a watch stream.
type WatchEvent struct {
	Type        string    `json:"type"`
	EventType   string    `json:"eventType,omitempty"`
	Path        string    `json:"path,omitempty"` // absolute, inside the sandbox
	IsDirectory bool      `json:"isDirectory,omitempty"`
	Cookie      uint32    `json:"cookie,omitempty"`
	Timestamp   time.Time `json:"timestamp"`
	Error       *Error    `json:"error,omitempty"`
	Reason      string    `json:"reason,omitempty"` // why a stream stopped
}

package api

import "time"

// Background process states. A process is running until its main process
// exits; then it is completed (exit 0), failed (non-zero exit or killed by a
// signal it was not asked to die of), killed (it ended after a kill request)
// or error (the agent lost its exit status; no exit code is reported then).
const (
	ProcessRunning   = "running"
	ProcessCompleted = "completed"
	ProcessFailed    = "failed"
	ProcessKilled    = "killed"
	ProcessError     = "error"
)

// StartProcessRequest starts a background process: Command runs with
// /bin/sh -c. With SessionID the process starts from that session's current
// working directory, exported environment and user; Cwd, Env and User
// override them.
type StartProcessRequest struct {
	Command   string `json:"command"`
	ID        string `json:"id,omitempty"` // default: generated
	Cwd       string `json:"cwd,omitempty"`
	Env       Env    `json:"env,omitempty"`
	User      string `json:"user,omitempty"`
	SessionID string `json:"sessionId,omitempty"`
	// EndWithMain ends the record when the main process exits, as E2B's
	// envd does, instead of when its whole process group is gone (the
	// default); the rest of the tree keeps running.
	EndWithMain bool `json:"endWithMain,omitempty"`
	// TimeoutMs kills the process (SIGTERM, grace, SIGKILL) after this
	// long; 0: never.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// LogBufferBytes caps the output kept per stream (stdout and stderr
	// each); older output is dropped. 0: 1 MiB. At most 64 MiB.
	LogBufferBytes int64 `json:"logBufferBytes,omitempty"`
}

// ProcessInfo describes one background process. ExitCode, Signal and
// EndedAt are set once it has ended (ExitCode stays nil when the exit
// status was lost: it is never made up).
type ProcessInfo struct {
	ID        string     `json:"id"`
	PID       int        `json:"pid"`
	Command   string     `json:"command"`
	Status    string     `json:"status"`
	SessionID string     `json:"sessionId,omitempty"`
	User      string     `json:"user"`
	Cwd       string     `json:"cwd"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	ExitCode  *int       `json:"exitCode,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// ProcessList is the body of GET /v1/processes.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// KillAllResult is the body of DELETE /v1/processes.
type KillAllResult struct {
	Killed int `json:"killed"`
}

// ProcessLogs is the buffered output of a process. Dropped* count bytes
// that fell out of the capped buffer.
type ProcessLogs struct {
	ID            string `json:"id"`
	Stdout        []byte `json:"stdout"`
	Stderr        []byte `json:"stderr"`
	DroppedStdout int64  `json:"droppedStdout,omitempty"`
	DroppedStderr int64  `json:"droppedStderr,omitempty"`
}

// WaitLogRequest waits until a line of stdout or stderr contains Pattern
// (or matches it, when Regex is set; RE2 syntax).
type WaitLogRequest struct {
	Pattern   string `json:"pattern"`
	Regex     bool   `json:"regex,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"` // 0: no timeout
}

// WaitLogResult is the first matching line (without its newline). Groups
// holds the whole match and the capture groups of a regex.
type WaitLogResult struct {
	Line   string   `json:"line"`
	Stream string   `json:"stream"` // stdout or stderr
	Groups []string `json:"groups,omitempty"`
}

// WaitPortRequest waits until Port accepts connections (Mode "tcp") or
// answers GET Path with a status in [StatusMin, StatusMax] (Mode "http",
// the default; 200–399 by default). The probe runs inside the sandbox
// against 127.0.0.1.
type WaitPortRequest struct {
	Port       int    `json:"port"`
	Mode       string `json:"mode,omitempty"`
	Path       string `json:"path,omitempty"`
	StatusMin  int    `json:"statusMin,omitempty"`
	StatusMax  int    `json:"statusMax,omitempty"`
	IntervalMs int64  `json:"intervalMs,omitempty"` // default 500, clamped to [10, 10000]
	TimeoutMs  int64  `json:"timeoutMs,omitempty"`  // 0: no timeout
}

// WaitPortResult says the port is ready. StatusCode is set in http mode.
type WaitPortResult struct {
	StatusCode int `json:"statusCode,omitempty"`
}

// WaitExitRequest waits for a process to end.
type WaitExitRequest struct {
	TimeoutMs int64 `json:"timeoutMs,omitempty"` // 0: no timeout
}

// WaitEnvelope is the body of a long-running call (wait-*, git checkout).
// The agent answers 200 at once and sends newlines while it works (so a
// dead agent is told apart from a slow operation), then exactly one of
// Result or Error.
type WaitEnvelope[T any] struct {
	Result *T     `json:"result,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// CreateSessionRequest creates a persistent shell session.
type CreateSessionRequest struct {
	ID   string `json:"id,omitempty"` // default: generated
	Env  Env    `json:"env,omitempty"`
	Cwd  string `json:"cwd,omitempty"`  // default: the user's home
	User string `json:"user,omitempty"` // default: the agent's default user
	// DefaultTimeoutMs is the timeout of a command that sets none; 0: none.
	DefaultTimeoutMs int64 `json:"defaultTimeoutMs,omitempty"`
}

// UpdateSessionRequest changes a live session (PATCH). Env is exported in
// the session's shell (a null value unsets the variable) and kept for a
// shell that restarts; DefaultTimeoutMs, when set, replaces the session's
// default command timeout (0: none). It waits for a running command.
type UpdateSessionRequest struct {
	Env              Env    `json:"env,omitempty"`
	DefaultTimeoutMs *int64 `json:"defaultTimeoutMs,omitempty"`
}

// SessionInfo describes a session. Cwd is the shell's current directory.
type SessionInfo struct {
	ID        string    `json:"id"`
	Shell     string    `json:"shell"`
	PID       int       `json:"pid,omitempty"` // 0 when the shell is not running
	User      string    `json:"user"`
	Cwd       string    `json:"cwd"`
	CreatedAt time.Time `json:"createdAt"`
	Alive     bool      `json:"alive"`
	// DefaultTimeoutMs is the session's default command timeout; 0: none.
	DefaultTimeoutMs int64 `json:"defaultTimeoutMs,omitempty"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

// SessionExitStatus ends a command run in a session. ShellExited says the
// command ended the session's shell (exit, exec, a fatal error); the exit
// code is then the shell's. Restarted says the shell had died before this
// command and a fresh one ran it: cwd, exported variables and shell
// functions were reset; Notice explains it.
type SessionExitStatus struct {
	ExitStatus
	ShellExited bool   `json:"shellExited,omitempty"`
	Restarted   bool   `json:"restarted,omitempty"`
	Notice      string `json:"notice,omitempty"`
}

// GitCheckoutRequest clones URL into TargetDir (default: ~/<repo name>).
// Accepted URL forms: https://, http://, git://, ssh://, file://, and
// scp-like user@host:path.
type GitCheckoutRequest struct {
	URL       string `json:"url"`
	Branch    string `json:"branch,omitempty"`
	Depth     int    `json:"depth,omitempty"`
	TargetDir string `json:"targetDir,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"` // default 10 minutes
	User      string `json:"user,omitempty"`
}

// GitCheckoutResult describes a finished clone.
type GitCheckoutResult struct {
	URL       string `json:"url"`
	Branch    string `json:"branch,omitempty"` // checked-out branch
	Commit    string `json:"commit,omitempty"` // HEAD commit
	TargetDir string `json:"targetDir"`
}

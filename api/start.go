package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/berth-sh/berth/internal/errdefs"
)

// StartProcessID is the background process id of a sandbox's start
// command: GET /v1/sandboxes/{name}/processes/start shows it, and its
// logs and wait-for-log/-port calls use that id too.
const StartProcessID = "start"

// DefaultReadyTimeoutMs bounds the wait for a start command's readiness
// when Ready gives no timeout of its own.
const DefaultReadyTimeoutMs = 60_000

// StartCommand is a sandbox's own start command: a background process
// (id StartProcessID) that the node runs once the agent is up, after every
// boot from files (the create, and each wake of a sandbox that slept in
// the stop tier or was rebooted). A thawed sandbox keeps the process it
// had. The process is not restarted when it exits; its record stays with
// its exit code and output, and the sandbox keeps running.
//
// In JSON it is an object, or a string as shorthand: "image" is
// {"image": true}, and any other string is {"command": that string}.
type StartCommand struct {
	// Image runs the image's own ENTRYPOINT and CMD (exec form, as the
	// image gives them), as the image's USER (root when it names none)
	// in its WORKDIR. The image must have one or the other.
	Image bool `json:"image,omitempty"`
	// Command runs with /bin/sh -c, with the defaults of an exec.
	Command string `json:"command,omitempty"`
	Cwd     string `json:"cwd,omitempty"`
	Env     Env    `json:"env,omitempty"`
	User    string `json:"user,omitempty"`
	// Ready, when set, is what the create (or get-or-create) that boots
	// the sandbox waits for before it answers.
	Ready *Readiness `json:"ready,omitempty"`
}

// Readiness is how a start command shows it is ready: exactly one of
// Port (the port accepts connections or answers HTTP), Log (a line of its
// output matches) and Command (a shell command exits 0, as E2B's
// readyCmd). Their TimeoutMs bounds the wait (0: DefaultReadyTimeoutMs);
// the wait also ends, failed, when the process exits first.
type Readiness struct {
	Port    *WaitPortRequest `json:"port,omitempty"`
	Log     *WaitLogRequest  `json:"log,omitempty"`
	Command *ReadyCommand    `json:"command,omitempty"`
}

// ReadyCommand is a readiness check run with /bin/sh -c inside the
// sandbox every IntervalMs (default 500, clamped to [50, 10000]), each
// try bounded to 10 s, until it exits 0.
type ReadyCommand struct {
	Command    string `json:"command"`
	IntervalMs int64  `json:"intervalMs,omitempty"`
	TimeoutMs  int64  `json:"timeoutMs,omitempty"`
}

// probes counts the probes set.
func (r Readiness) probes() int {
	n := 0
	for _, set := range []bool{r.Port != nil, r.Log != nil, r.Command != nil} {
		if set {
			n++
		}
	}
	return n
}

// UnmarshalJSON accepts the object form and the string shorthand.
func (s *StartCommand) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		if str == "image" {
			*s = StartCommand{Image: true}
		} else {
			*s = StartCommand{Command: str}
		}
		return nil
	}
	// The object form is as strict as the request around it (a decoder
	// with DisallowUnknownFields does not reach into an Unmarshaler).
	type plain StartCommand
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("start: want \"image\", a command string or an object: %w", err)
	}
	*s = StartCommand(p)
	return nil
}

// ReadyTimeoutMs is the bound of the readiness wait.
func (r Readiness) ReadyTimeoutMs() int64 {
	var t int64
	switch {
	case r.Port != nil:
		t = r.Port.TimeoutMs
	case r.Log != nil:
		t = r.Log.TimeoutMs
	case r.Command != nil:
		t = r.Command.TimeoutMs
	}
	if t <= 0 {
		return DefaultReadyTimeoutMs
	}
	return t
}

// CheckShape refuses a start command that is neither or both of Image
// and Command, or a Ready with other than exactly one probe. The native
// API checks every field (lengths, paths, patterns) before this.
func (s StartCommand) CheckShape() error {
	switch {
	case s.Image && s.Command != "":
		return errdefs.InvalidArgument("start: give image or command, not both")
	case !s.Image && s.Command == "":
		return errdefs.InvalidArgument("start: give \"image\" (the image's ENTRYPOINT and CMD) or a command")
	case s.Ready != nil && s.Ready.probes() != 1:
		return errdefs.InvalidArgument("start.ready: give exactly one of port, log and command")
	}
	return nil
}

package api

import "github.com/berth-sh/berth/internal/errdefs"

// Sleep modes: what a sandbox keeps while it sleeps (the sleep tier it
// is put to sleep in first). The operator's default applies when a create
// names none (berth serve --sleep-mode, itself "stop" by default).
const (
	// SleepFreeze freezes the sandbox's cgroup: its container, network,
	// mounts and memory stay on the host, it uses no CPU, and a wake is a
	// thaw where every process continues. It escalates to checkpoint (when
	// the node can) or stop after a time frozen or under the host's budget
	// for frozen memory.
	SleepFreeze = "freeze"
	// SleepCheckpoint writes the sandbox's processes to disk (CRIU); only
	// accepted when the node can checkpoint.
	SleepCheckpoint = "checkpoint"
	// SleepStop stops the compute and keeps the files only (processes end).
	SleepStop = "stop"
)

// ValidSleepMode checks a sleep mode; "" (the operator's default) is valid.
func ValidSleepMode(s string) error {
	switch s {
	case "", SleepFreeze, SleepCheckpoint, SleepStop:
		return nil
	}
	return errdefs.InvalidArgument("sleep must be %q, %q or %q, got %q", SleepFreeze, SleepCheckpoint, SleepStop, s)
}

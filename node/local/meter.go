package local

import "time"

// Meter receives the node's lifecycle measurements (package metrics
// implements it; this package does not import prometheus). Config.Meter
// nil: nothing is measured.
type Meter interface {
	// StartDone: a start ended with a running sandbox after d, by path
	// ("cold", "pool", "snapshot", "wake").
	StartDone(path string, d time.Duration)
	// AgentDied: a sandbox's agent (its PID 1) exited unasked.
	AgentDied()
	// Repaired: reconcile repaired host state of a kind
	// ("compute-lost", "orphan-container", "orphan-mount",
	// "orphan-layer", "orphan-blob").
	Repaired(kind string)
}

type nopMeter struct{}

func (nopMeter) StartDone(string, time.Duration) {}
func (nopMeter) AgentDied()                      {}
func (nopMeter) Repaired(string)                 {}

// startPath is the metric path of a cold start of rec (start): a wake if
// it slept, a restore if it boots from a snapshot's layers, else cold.
func startPath(wasSleeping bool, snapshot, persisted string) string {
	switch {
	case wasSleeping:
		return "wake"
	case snapshot != "" || persisted != "":
		return "snapshot"
	}
	return "cold"
}

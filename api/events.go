package api

import "time"

// Event types of GET /v1/events and of operator webhooks (package events).
const (
	EventCreated     = "sandbox.created"
	EventStarted     = "sandbox.started"
	EventWoke        = "sandbox.woke"
	EventSlept       = "sandbox.slept"
	EventSnapshotted = "sandbox.snapshotted"
	EventForked      = "sandbox.forked"
	EventDestroyed   = "sandbox.destroyed"
	EventFailed      = "sandbox.failed"
	EventOOMKilled   = "sandbox.oom-killed"
)

// Event is one lifecycle event, derived from one journal entry.
type Event struct {
	// ID is the journal entry's sequence number as a decimal string: the
	// SSE id (Last-Event-ID) and a webhook's idempotency id.
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Sandbox string    `json:"sandbox"`
	Tenant  string    `json:"tenant,omitempty"` // "" for the operator's own sandboxes, or when unknown
	At      time.Time `json:"at"`
	// Op is the journal operation the event came from (create,
	// start-failed, ...); Detail is its detail text.
	Op     string `json:"op"`
	Detail string `json:"detail,omitempty"`
}

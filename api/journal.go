package api

import (
	"encoding/json"
	"time"
)

// IdempotencyKeyHeader on a mutating request makes a retry with the same
// key return the first response instead of repeating the effect, also
// after a daemon restart. IdempotentReplayHeader marks such a replay.
const (
	IdempotencyKeyHeader   = "Idempotency-Key"
	IdempotentReplayHeader = "Idempotent-Replayed"
)

// JournalEntry is one recorded operation of a controller.
type JournalEntry struct {
	Seq    int64  `json:"seq"`
	Op     string `json:"op"`
	Key    string `json:"key,omitempty"` // idempotency key (hashed for HTTP calls)
	Detail string `json:"detail,omitempty"`
	// Args are the operation's arguments with secrets redacted.
	Args       json.RawMessage `json:"args,omitempty"`
	Status     string          `json:"status,omitempty"` // pending, done, failed
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	At         time.Time       `json:"at"`
	FinishedAt *time.Time      `json:"finishedAt,omitempty"`
}

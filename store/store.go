package store

import (
	"context"
	"time"

	"github.com/berth-sh/berth/api"
)

// Sandbox is the persisted record of one named sandbox. The controller is
// the only writer; Version implements optimistic concurrency so that two
// daemons (or a bug) can never silently overwrite each other.
type Sandbox struct {
	Name        string
	ID          string // stable per name lifetime; names the container, netns, upper dir
	State       string // api.State*
	Image       string // what the user asked for
	ImageDigest string // what it runs (set at first start, kept after)
	Instance    string
	Resources   api.Resources
	Internet    bool
	Env         map[string]string
	Labels      map[string]string
	SleepAfter  time.Duration
	KeepAlive   bool
	IP          string
	Error       string
	OOMKilled   bool
	CreatedAt   time.Time
	StartedAt   time.Time // zero when not running
	LastActive  time.Time
	SleepAt     time.Time // the sleepAfter alarm; zero when none is armed
	Version     int64     // bumped by every Put; 0 for a new record
}

// JournalEntry records one lifecycle operation. Key is an idempotency key:
// appending an entry whose key already exists is a no-op that returns
// ErrAlreadyExists, so a retried operation can detect it already ran.
type JournalEntry struct {
	Seq     int64
	Sandbox string
	Op      string // create, start, sleep, wake, destroy, reconcile, ...
	Key     string
	Detail  string
	At      time.Time
}

// Store is the controller's state store.
type Store interface {
	// Get returns the record for name, or an errdefs not-found error.
	Get(ctx context.Context, name string) (Sandbox, error)
	// List returns all records ordered by name.
	List(ctx context.Context) ([]Sandbox, error)
	// Put inserts (Version 0) or updates a record. An update succeeds only
	// if the stored Version equals sb.Version; it returns the new Version.
	// A mismatch is an errdefs failed-precondition error; inserting an
	// existing name is already-exists.
	Put(ctx context.Context, sb Sandbox) (int64, error)
	// Delete removes the record; deleting a missing name is not an error.
	Delete(ctx context.Context, name string) error
	// DueAlarms returns records whose SleepAt is set and not after now.
	DueAlarms(ctx context.Context, now time.Time) ([]Sandbox, error)
	// Append adds a journal entry (see JournalEntry for Key semantics).
	Append(ctx context.Context, e JournalEntry) error
	// Journal returns the entries for one sandbox, oldest first.
	Journal(ctx context.Context, sandbox string) ([]JournalEntry, error)
	Close() error
}

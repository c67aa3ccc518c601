package store

import (
	"context"
	"time"
)

// ObjectKV is one key of a durable object's storage. Value is JSON.
type ObjectKV struct {
	Key   string
	Value []byte
}

// ObjectWrite is one change in an all-or-nothing commit: a put, or a
// delete when Delete is set.
type ObjectWrite struct {
	Key    string
	Value  []byte
	Delete bool
}

// ObjectAlarm is the one alarm a durable object may have armed. Seq
// changes on every SetObjectAlarm, so a delivery can clear exactly the
// alarm it delivered and never one its handler armed anew. Attempts counts
// deliveries that started (persisted before the handler runs), so a crash
// mid-handler shows up as a retry after restart.
type ObjectAlarm struct {
	Object    string
	At        time.Time // next delivery; moves to the retry time on each attempt
	Scheduled time.Time // the time it was set for
	Attempts  int
	Seq       int64
}

// Objects is the state of durable objects (package durable): per-object
// key-value storage and alarms. object names one instance, "class/id".
type Objects interface {
	// ObjectGet returns one value; ok is false when the key is absent.
	ObjectGet(ctx context.Context, object, key string) (value []byte, ok bool, err error)
	// ObjectList returns keys with prefix, from start (inclusive) in
	// byte order, at most limit (limit <= 0: no limit).
	ObjectList(ctx context.Context, object, prefix, start string, limit int) ([]ObjectKV, error)
	// ObjectCommit applies writes in one transaction: all or none.
	ObjectCommit(ctx context.Context, object string, writes []ObjectWrite) error
	// ObjectDeleteAll removes every key and the alarm of object.
	ObjectDeleteAll(ctx context.Context, object string) error

	// SetObjectAlarm arms (or moves) object's alarm and resets Attempts.
	SetObjectAlarm(ctx context.Context, object string, at time.Time) (ObjectAlarm, error)
	// GetObjectAlarm returns the armed alarm; ok is false when none is.
	GetObjectAlarm(ctx context.Context, object string) (a ObjectAlarm, ok bool, err error)
	DeleteObjectAlarm(ctx context.Context, object string) error
	// DueObjectAlarms lists alarms whose time is not after now, soonest first.
	DueObjectAlarms(ctx context.Context, now time.Time, limit int) ([]ObjectAlarm, error)
	// AttemptObjectAlarm records that delivery of alarm seq starts and
	// moves its time to retryAt (where it fires again if this delivery
	// never finishes). It returns the attempt count, or ok=false if the
	// alarm was replaced or deleted meanwhile.
	AttemptObjectAlarm(ctx context.Context, object string, seq int64, retryAt time.Time) (attempts int, ok bool, err error)
	// DeferObjectAlarm moves alarm seq to at without counting an attempt
	// (no daemon here can deliver it).
	DeferObjectAlarm(ctx context.Context, object string, seq int64, at time.Time) error
	// ClearObjectAlarm deletes the alarm only if it is still seq.
	ClearObjectAlarm(ctx context.Context, object string, seq int64) error
}

// Journal statuses of an operation recorded with Begin.
const (
	OpPending = "pending" // started; no result yet (or the daemon died)
	OpDone    = "done"
	OpFailed  = "failed"
)

// Ops records operations with their arguments and results so that a retry
// with the same idempotency key returns the first result instead of
// repeating the effect, also after a restart.
type Ops interface {
	// Begin appends an entry: pending unless e.Status says otherwise (a
	// finished entry is written in one go, with Result, Error and
	// Finished). If e.Key is already recorded it returns that entry and an
	// errdefs already-exists error.
	Begin(ctx context.Context, e JournalEntry) (JournalEntry, error)
	// Finish records the outcome of the entry seq (status OpDone or OpFailed).
	Finish(ctx context.Context, seq int64, status, result, errMsg string, at time.Time) error
	// JournalByKey returns the entry recorded with key, or not found.
	JournalByKey(ctx context.Context, key string) (JournalEntry, error)
	// PruneJournal deletes entries recorded before t (a keyed retry
	// after that runs again) and returns how many went.
	PruneJournal(ctx context.Context, before time.Time) (int64, error)
}

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations upgrade a database in order; PRAGMA user_version records how
// many have run. The base schema (schema, artifactSchema) is version 0 and
// stays CREATE IF NOT EXISTS, so databases made before migrations existed
// upgrade like new ones. Append only: never edit a released migration.
var migrations = []string{
	// 1: durable objects (storage, alarms) and the operation journal's
	// arguments, outcome and finish time (idempotent retries).
	`
CREATE TABLE IF NOT EXISTS object_kv (
	object TEXT NOT NULL,
	key    TEXT NOT NULL,
	value  TEXT NOT NULL,
	PRIMARY KEY (object, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS object_alarms (
	object   TEXT PRIMARY KEY,
	at       INTEGER NOT NULL, -- unix ms: next delivery (moves on retry)
	scheduled INTEGER NOT NULL, -- unix ms: the time it was set for
	attempts INTEGER NOT NULL DEFAULT 0,
	seq      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS object_alarms_at ON object_alarms(at);
ALTER TABLE journal ADD COLUMN args TEXT NOT NULL DEFAULT '';
ALTER TABLE journal ADD COLUMN status TEXT NOT NULL DEFAULT '';
ALTER TABLE journal ADD COLUMN result TEXT NOT NULL DEFAULT '';
ALTER TABLE journal ADD COLUMN error TEXT NOT NULL DEFAULT '';
ALTER TABLE journal ADD COLUMN finished INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS journal_at ON journal(at);
`,
	// 2: cluster membership and leases (store.Cluster). On one host there
	// is one node entry and leases never contend, but the semantics are
	// the PostgreSQL store's, so code written against them runs on both.
	`
CREATE TABLE IF NOT EXISTS nodes (
	name       TEXT PRIMARY KEY,
	epoch      INTEGER NOT NULL,
	started_at INTEGER NOT NULL, -- unix ms
	heartbeat  INTEGER NOT NULL, -- unix ms, the store's clock
	draining   INTEGER NOT NULL DEFAULT 0,
	doc        TEXT NOT NULL     -- the rest of store.Node as JSON
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
	key     TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,       -- '' once released (the epoch stays)
	epoch   INTEGER NOT NULL,
	expires INTEGER NOT NULL     -- unix ms, the store's clock
) WITHOUT ROWID;
`,
	// 3: named volumes (store.Volumes).
	`
CREATE TABLE IF NOT EXISTS volumes (
	name    TEXT PRIMARY KEY,
	version INTEGER NOT NULL,
	doc     TEXT NOT NULL
) WITHOUT ROWID;
`,
}

// migrate runs the migrations the database has not seen, each in its own
// transaction together with the version bump, so a crash mid-way leaves
// the database at a whole version.
func migrate(ctx context.Context, db *sql.DB) error {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	for i := v; i < len(migrations); i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	return nil
}

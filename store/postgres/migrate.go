package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/internal/errdefs"
)

// migrateLock is the advisory lock key every berth process takes (for
// the length of one migration's transaction) before it reads the schema
// version: processes that start together against one database apply
// each migration once, one after the other. The number is arbitrary;
// only berth uses it.
const migrateLock int64 = 0x6265727468_01 // "berth", 1

// migrations upgrade a database in order; schema_version records each
// one applied. Append only: never edit a migration once released (a
// database that ran it would never see the change).
//
// Names and keys that must sort in byte order (as the SQLite store
// sorts them, whatever the database's collation) are COLLATE "C", or
// bytea where any bytes must survive (durable objects' keys and values).
// Times are timestamptz; JSON documents are json (kept verbatim) so an
// operator can query them.
var migrations = []string{
	// 1: the state store, durable objects, secrets, cluster membership
	// and leases.
	`
CREATE TABLE sandboxes (
	name     text COLLATE "C" PRIMARY KEY,
	state    text NOT NULL,
	sleep_at timestamptz,          -- NULL: no alarm armed
	version  bigint NOT NULL,
	doc      json NOT NULL         -- the full store.Sandbox
);
CREATE INDEX sandboxes_sleep_at ON sandboxes(sleep_at) WHERE sleep_at IS NOT NULL;

CREATE TABLE journal (
	seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	sandbox  text NOT NULL,
	op       text NOT NULL,
	key      text UNIQUE,          -- the idempotency key; NULL: none
	detail   text NOT NULL DEFAULT '',
	at       timestamptz NOT NULL,
	args     text NOT NULL DEFAULT '',
	status   text NOT NULL DEFAULT '',
	result   text NOT NULL DEFAULT '',
	error    text NOT NULL DEFAULT '',
	finished timestamptz
);
CREATE INDEX journal_sandbox ON journal(sandbox, seq);
CREATE INDEX journal_at ON journal(at);

CREATE TABLE snapshots (
	id         text PRIMARY KEY,
	name       text NOT NULL DEFAULT '',
	sandbox    text NOT NULL DEFAULT '',
	created_at timestamptz,
	expires_at timestamptz NOT NULL,
	doc        json NOT NULL
);
CREATE INDEX snapshots_sandbox ON snapshots(sandbox);
CREATE INDEX snapshots_expires ON snapshots(expires_at);
CREATE TABLE backups (
	id         text PRIMARY KEY,
	sandbox    text NOT NULL DEFAULT '',
	created_at timestamptz,
	expires_at timestamptz NOT NULL,
	doc        json NOT NULL
);

CREATE TABLE secrets (
	name       text COLLATE "C" PRIMARY KEY,
	value      bytea NOT NULL,
	updated_at timestamptz NOT NULL
);

CREATE TABLE object_kv (
	object text NOT NULL,
	key    bytea NOT NULL,
	value  bytea NOT NULL,
	PRIMARY KEY (object, key)
);
-- A sequence, not MAX(seq)+1: a seq is never handed out twice, also after
-- an alarm is cleared and armed again, and two processes arming at once
-- never compute the same one.
CREATE SEQUENCE object_alarm_seq;
CREATE TABLE object_alarms (
	object    text PRIMARY KEY,
	at        timestamptz NOT NULL, -- next delivery (moves on each attempt)
	scheduled timestamptz NOT NULL, -- the time it was set for
	attempts  integer NOT NULL DEFAULT 0,
	seq       bigint NOT NULL
);
CREATE INDEX object_alarms_at ON object_alarms(at);

CREATE TABLE nodes (
	name       text COLLATE "C" PRIMARY KEY,
	epoch      bigint NOT NULL,
	started_at timestamptz NOT NULL,
	heartbeat  timestamptz NOT NULL, -- the server's clock
	draining   boolean NOT NULL DEFAULT false,
	doc        json NOT NULL         -- the rest of store.Node
);
CREATE TABLE leases (
	key     text PRIMARY KEY,
	holder  text NOT NULL,           -- '' once released (the epoch stays)
	epoch   bigint NOT NULL,
	expires timestamptz NOT NULL     -- the server's clock
);
`,
	// 2: named volumes (store.Volumes).
	`
CREATE TABLE volumes (
	name    text COLLATE "C" PRIMARY KEY,
	version bigint NOT NULL,
	doc     json NOT NULL
);
`,
}

// migrate applies the migrations the database has not seen, each in its
// own transaction together with its schema_version row, so a crash (or a
// lost connection) mid-way leaves the database at a whole version. The
// advisory lock is taken first in each transaction and released by its
// end: a second process waits, then sees the version already applied.
func (s *Store) migrate(ctx context.Context) error {
	for i := range migrations {
		version := i + 1
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLock); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
				version    integer PRIMARY KEY,
				applied_at timestamptz NOT NULL DEFAULT now()
			)`); err != nil {
				return err
			}
			var done bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_version WHERE version = $1)`, version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", version, err)
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_version(version) VALUES($1)`, version)
			return err
		})
		if err != nil {
			return err
		}
	}
	return s.checkVersion(ctx)
}

// checkVersion refuses a database migrated by a newer berth: this binary
// does not know what the later migrations changed.
func (s *Store) checkVersion(ctx context.Context) error {
	var latest int
	if err := s.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`, nil, &latest); err != nil {
		return err
	}
	if latest > len(migrations) {
		return errdefs.FailedPrecondition("the database's schema is at version %d, newer than this berth's %d: upgrade berth", latest, len(migrations))
	}
	return nil
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"syscall"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/berth-sh/berth/internal/errdefs"
)

// conn is the database handle every query and write goes through. A full
// disk under the state store comes back as resource_exhausted with a
// message that says so, instead of an internal error: SQLite rolls the
// statement or transaction back, so nothing half-written stays, and the
// next write succeeds once there is room again.
type conn struct{ *sql.DB }

func (c conn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r, err := c.DB.ExecContext(ctx, query, args...)
	return r, classify(err)
}

func (c conn) BeginTx(ctx context.Context, opts *sql.TxOptions) (tx, error) {
	t, err := c.DB.BeginTx(ctx, opts)
	return tx{t}, classify(err)
}

// tx is a transaction whose writes and commit are classified like conn's.
type tx struct{ *sql.Tx }

func (t tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r, err := t.Tx.ExecContext(ctx, query, args...)
	return r, classify(err)
}

func (t tx) Commit() error { return classify(t.Tx.Commit()) }

// classify turns SQLite's "database or disk is full" (and a bare ENOSPC)
// into errdefs.ResourceExhausted; other errors pass unchanged.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se *sqlite.Error
	if (errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL) || errors.Is(err, syscall.ENOSPC) {
		return errdefs.NoSpace("state store: the disk is full (%w); free space on the data directory's filesystem and retry", err)
	}
	return err
}

// isDuplicate reports whether err is SQLite refusing a row whose UNIQUE or
// PRIMARY KEY column is already taken (the driver reports extended result
// codes, so the constraint's own code is there to compare).
func isDuplicate(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

const schema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	name     TEXT PRIMARY KEY,
	state    TEXT NOT NULL,
	sleep_at INTEGER NOT NULL DEFAULT 0, -- unix ms; 0 = no alarm
	version  INTEGER NOT NULL,
	doc      TEXT NOT NULL              -- the full record as JSON
);
CREATE INDEX IF NOT EXISTS sandboxes_sleep_at ON sandboxes(sleep_at) WHERE sleep_at > 0;
CREATE TABLE IF NOT EXISTS journal (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox TEXT NOT NULL,
	op      TEXT NOT NULL,
	key     TEXT UNIQUE,
	detail  TEXT NOT NULL DEFAULT '',
	at      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_sandbox ON journal(sandbox, seq);
`

// Store is a SQLite-backed store.Store.
type Store struct{ db conn }

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at path.
func Open(ctx context.Context, path string) (*Store, error) {
	// _txlock=immediate takes the write lock at BEGIN, so two writers
	// serialize instead of failing with SQLITE_BUSY at commit time.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)" +
		"&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(ON)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open state db %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and a single
	// connection makes every statement see the latest commit.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema+artifactSchema+secretSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("init state db %s: %w", path, err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate state db %s: %w", path, err)
	}
	return &Store{db: conn{db}}, nil
}

func (s *Store) Close() error { return s.db.Close() }

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// decode is store.DecodeSandbox: the record format both stores share.
var decode = store.DecodeSandbox

func (s *Store) Get(ctx context.Context, name string) (store.Sandbox, error) {
	var doc string
	var version int64
	err := s.db.QueryRowContext(ctx, `SELECT doc, version FROM sandboxes WHERE name = ?`, name).Scan(&doc, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %q: %w", name, err)
	}
	return decode(doc, version)
}

func (s *Store) query(ctx context.Context, q string, args ...any) ([]store.Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []store.Sandbox
	for rows.Next() {
		var doc string
		var version int64
		if err := rows.Scan(&doc, &version); err != nil {
			return nil, err
		}
		sb, err := decode(doc, version)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

func (s *Store) List(ctx context.Context) ([]store.Sandbox, error) {
	return s.query(ctx, `SELECT doc, version FROM sandboxes ORDER BY name`)
}

func (s *Store) DueAlarms(ctx context.Context, now time.Time) ([]store.Sandbox, error) {
	return s.query(ctx, `SELECT doc, version FROM sandboxes WHERE sleep_at > 0 AND sleep_at <= ? ORDER BY sleep_at`, now.UnixMilli())
}

func (s *Store) Put(ctx context.Context, sb store.Sandbox) (int64, error) {
	old := sb.Version
	sb.Version = old + 1
	doc, err := json.Marshal(sb)
	if err != nil {
		return 0, err
	}
	if old == 0 {
		_, err := s.db.ExecContext(ctx,
			`INSERT INTO sandboxes(name, state, sleep_at, version, doc) VALUES(?, ?, ?, ?, ?)`,
			sb.Name, sb.State, ms(sb.SleepAt), sb.Version, string(doc))
		if err != nil {
			if isDuplicate(err) {
				return 0, errdefs.AlreadyExists("sandbox %q already exists", sb.Name)
			}
			return 0, fmt.Errorf("insert sandbox %q: %w", sb.Name, err)
		}
		return sb.Version, nil
	}
	res, err := s.db.ExecContext(ctx,
		`UPDATE sandboxes SET state = ?, sleep_at = ?, version = ?, doc = ? WHERE name = ? AND version = ?`,
		sb.State, ms(sb.SleepAt), sb.Version, string(doc), sb.Name, old)
	if err != nil {
		return 0, fmt.Errorf("update sandbox %q: %w", sb.Name, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return 0, errdefs.FailedPrecondition("sandbox %q was changed concurrently (version %d)", sb.Name, old)
	}
	return sb.Version, nil
}

func (s *Store) Delete(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE name = ?`, name); err != nil {
		return fmt.Errorf("delete sandbox %q: %w", name, err)
	}
	return nil
}

func (s *Store) Append(ctx context.Context, e store.JournalEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	var key any
	if e.Key != "" {
		key = e.Key
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO journal(sandbox, op, key, detail, at) VALUES(?, ?, ?, ?, ?)`,
		e.Sandbox, e.Op, key, e.Detail, e.At.UnixMilli())
	if err != nil {
		if isDuplicate(err) {
			return errdefs.AlreadyExists("journal key %q already recorded", e.Key)
		}
		return fmt.Errorf("append journal: %w", err)
	}
	return nil
}

func (s *Store) JournalAfter(ctx context.Context, afterSeq int64, limit int) ([]store.JournalEntry, error) {
	if limit <= 0 {
		limit = 1000
	}
	return s.queryJournal(ctx, fmt.Sprintf("read journal after %d", afterSeq),
		`SELECT `+journalCols+` FROM journal WHERE seq > ? ORDER BY seq LIMIT ?`, afterSeq, limit)
}

func (s *Store) Journal(ctx context.Context, sandbox string) ([]store.JournalEntry, error) {
	return s.queryJournal(ctx, "read journal", `SELECT `+journalCols+` FROM journal WHERE sandbox = ? ORDER BY seq`, sandbox)
}

// queryJournal runs a query of journal rows (journalCols); what names it
// in the error.
func (s *Store) queryJournal(ctx context.Context, what, query string, args ...any) ([]store.JournalEntry, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []store.JournalEntry
	for rows.Next() {
		e, err := scanJournal(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

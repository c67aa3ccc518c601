package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/store"
)

// FailpointObjectCommit is hit inside ObjectCommit after the first write
// and before COMMIT: a crash there must leave none of the writes.
const FailpointObjectCommit = "store.object-commit"

func (s *Store) ObjectGet(ctx context.Context, object, key string) ([]byte, bool, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM object_kv WHERE object = ? AND key = ?`, object, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("storage get %q: %w", key, err)
	}
	return []byte(v), true, nil
}

// prefixEnd is the smallest string greater than every string with prefix,
// or "" when there is none (prefix is all 0xff bytes).
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

func (s *Store) ObjectList(ctx context.Context, object, prefix, start string, limit int) ([]store.ObjectKV, error) {
	q := `SELECT key, value FROM object_kv WHERE object = ?`
	args := []any{object}
	lo := prefix
	if start > lo {
		lo = start
	}
	if lo != "" {
		q += ` AND key >= ?`
		args = append(args, lo)
	}
	if end := prefixEnd(prefix); prefix != "" && end != "" {
		q += ` AND key < ?`
		args = append(args, end)
	}
	q += ` ORDER BY key`
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("storage list: %w", err)
	}
	defer rows.Close()
	out := []store.ObjectKV{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		out = append(out, store.ObjectKV{Key: k, Value: []byte(v)})
	}
	return out, rows.Err()
}

func (s *Store) ObjectCommit(ctx context.Context, object string, writes []store.ObjectWrite) error {
	if len(writes) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storage commit: %w", err)
	}
	defer tx.Rollback()
	for i, w := range writes {
		if w.Delete {
			_, err = tx.ExecContext(ctx, `DELETE FROM object_kv WHERE object = ? AND key = ?`, object, w.Key)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO object_kv(object, key, value) VALUES(?, ?, ?)
				ON CONFLICT(object, key) DO UPDATE SET value = excluded.value`, object, w.Key, string(w.Value))
		}
		if err != nil {
			return fmt.Errorf("storage commit %q: %w", w.Key, err)
		}
		if i == 0 {
			failpoint.Hit(FailpointObjectCommit)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storage commit: %w", err)
	}
	return nil
}

func (s *Store) ObjectDeleteAll(ctx context.Context, object string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM object_kv WHERE object = ?`, object); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM object_alarms WHERE object = ?`, object); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *Store) SetObjectAlarm(ctx context.Context, object string, at time.Time) (store.ObjectAlarm, error) {
	var seq int64
	err := s.db.QueryRowContext(ctx, `INSERT INTO object_alarms(object, at, scheduled, attempts, seq)
		VALUES(?, ?, ?, 0, COALESCE((SELECT MAX(seq) FROM object_alarms), 0) + 1)
		ON CONFLICT(object) DO UPDATE SET at = excluded.at, scheduled = excluded.scheduled, attempts = 0, seq = excluded.seq
		RETURNING seq`, object, at.UnixMilli(), at.UnixMilli()).Scan(&seq)
	if err != nil {
		return store.ObjectAlarm{}, fmt.Errorf("set alarm: %w", err)
	}
	t := time.UnixMilli(at.UnixMilli())
	return store.ObjectAlarm{Object: object, At: t, Scheduled: t, Seq: seq}, nil
}

func scanAlarm(sc interface{ Scan(...any) error }) (store.ObjectAlarm, error) {
	var a store.ObjectAlarm
	var at, sched int64
	if err := sc.Scan(&a.Object, &at, &sched, &a.Attempts, &a.Seq); err != nil {
		return a, err
	}
	a.At, a.Scheduled = time.UnixMilli(at), time.UnixMilli(sched)
	return a, nil
}

func (s *Store) GetObjectAlarm(ctx context.Context, object string) (store.ObjectAlarm, bool, error) {
	a, err := scanAlarm(s.db.QueryRowContext(ctx, `SELECT object, at, scheduled, attempts, seq FROM object_alarms WHERE object = ?`, object))
	if errors.Is(err, sql.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("get alarm: %w", err)
	}
	return a, true, nil
}

func (s *Store) DeleteObjectAlarm(ctx context.Context, object string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM object_alarms WHERE object = ?`, object)
	return err
}

func (s *Store) DueObjectAlarms(ctx context.Context, now time.Time, limit int) ([]store.ObjectAlarm, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.db.QueryContext(ctx, `SELECT object, at, scheduled, attempts, seq FROM object_alarms WHERE at <= ? ORDER BY at LIMIT ?`, now.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("due alarms: %w", err)
	}
	defer rows.Close()
	var out []store.ObjectAlarm
	for rows.Next() {
		a, err := scanAlarm(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func (s *Store) AttemptObjectAlarm(ctx context.Context, object string, seq int64, retryAt time.Time) (int, bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `UPDATE object_alarms SET attempts = attempts + 1, at = ?
		WHERE object = ? AND seq = ? RETURNING attempts`, retryAt.UnixMilli(), object, seq).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("alarm attempt: %w", err)
	}
	return n, true, nil
}

func (s *Store) DeferObjectAlarm(ctx context.Context, object string, seq int64, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE object_alarms SET at = ? WHERE object = ? AND seq = ?`, at.UnixMilli(), object, seq)
	return err
}

func (s *Store) ClearObjectAlarm(ctx context.Context, object string, seq int64) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM object_alarms WHERE object = ? AND seq = ?`, object, seq)
	return err
}

func (s *Store) Begin(ctx context.Context, e store.JournalEntry) (store.JournalEntry, error) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.Status == "" {
		e.Status = store.OpPending
	}
	var key any
	if e.Key != "" {
		key = e.Key
	}
	err := s.db.QueryRowContext(ctx, `INSERT INTO journal(sandbox, op, key, detail, at, args, status, result, error, finished)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
		e.Sandbox, e.Op, key, e.Detail, e.At.UnixMilli(), e.Args, e.Status, e.Result, e.Error, ms(e.Finished)).Scan(&e.Seq)
	if err != nil {
		if isDuplicate(err) {
			prev, gerr := s.JournalByKey(ctx, e.Key)
			if gerr != nil {
				return e, gerr
			}
			return prev, errdefs.AlreadyExists("journal key %q already recorded", e.Key)
		}
		return e, fmt.Errorf("append journal: %w", err)
	}
	return e, nil
}

func (s *Store) Finish(ctx context.Context, seq int64, status, result, errMsg string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE journal SET status = ?, result = ?, error = ?, finished = ? WHERE seq = ?`,
		status, result, errMsg, at.UnixMilli(), seq)
	if err != nil {
		return fmt.Errorf("finish journal entry %d: %w", seq, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errdefs.NotFound("journal entry %d not found", seq)
	}
	return nil
}

const journalCols = `seq, sandbox, op, COALESCE(key, ''), detail, at, args, status, result, error, finished`

func scanJournal(sc interface{ Scan(...any) error }) (store.JournalEntry, error) {
	var e store.JournalEntry
	var at, fin int64
	if err := sc.Scan(&e.Seq, &e.Sandbox, &e.Op, &e.Key, &e.Detail, &at, &e.Args, &e.Status, &e.Result, &e.Error, &fin); err != nil {
		return e, err
	}
	e.At = time.UnixMilli(at)
	if fin != 0 {
		e.Finished = time.UnixMilli(fin)
	}
	return e, nil
}

func (s *Store) JournalByKey(ctx context.Context, key string) (store.JournalEntry, error) {
	e, err := scanJournal(s.db.QueryRowContext(ctx, `SELECT `+journalCols+` FROM journal WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return e, errdefs.NotFound("no journal entry with key %q", key)
	}
	if err != nil {
		return e, fmt.Errorf("read journal: %w", err)
	}
	return e, nil
}

func (s *Store) PruneJournal(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM journal WHERE at < ?`, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	return res.RowsAffected()
}

package postgres

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/store"
)

// FailpointObjectCommit is hit inside ObjectCommit after the first write
// and before COMMIT: a crash there must leave none of the writes. The
// name is the SQLite store's, so one crash test drives either store.
const FailpointObjectCommit = "store.object-commit"

func (s *Store) ObjectGet(ctx context.Context, object, key string) ([]byte, bool, error) {
	var v []byte
	err := s.queryRow(ctx, `SELECT value FROM object_kv WHERE object = $1 AND key = $2`, []any{object, []byte(key)}, &v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fail(ctx, err, "storage get "+strconv.Quote(key))
	}
	return v, true, nil
}

// prefixEnd is the smallest byte string greater than every string with
// prefix, or nil when there is none (prefix is all 0xff bytes). Keys are
// bytea, so it never needs to be valid UTF-8.
func prefixEnd(prefix string) []byte {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return b[:i+1]
		}
	}
	return nil
}

func (s *Store) ObjectList(ctx context.Context, object, prefix, start string, limit int) ([]store.ObjectKV, error) {
	q := `SELECT key, value FROM object_kv WHERE object = $1`
	args := []any{object}
	lo := prefix
	if start > lo {
		lo = start
	}
	if lo != "" {
		args = append(args, []byte(lo))
		q += ` AND key >= $` + strconv.Itoa(len(args))
	}
	if end := prefixEnd(prefix); prefix != "" && end != nil {
		args = append(args, end)
		q += ` AND key < $` + strconv.Itoa(len(args))
	}
	q += ` ORDER BY key`
	if limit > 0 {
		args = append(args, limit)
		q += ` LIMIT $` + strconv.Itoa(len(args))
	}
	out := []store.ObjectKV{}
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k, v []byte
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			out = append(out, store.ObjectKV{Key: string(k), Value: v})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "storage list")
	}
	return out, nil
}

func (s *Store) ObjectCommit(ctx context.Context, object string, writes []store.ObjectWrite) error {
	if len(writes) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		for i, w := range writes {
			var err error
			if w.Delete {
				_, err = tx.Exec(ctx, `DELETE FROM object_kv WHERE object = $1 AND key = $2`, object, []byte(w.Key))
			} else {
				_, err = tx.Exec(ctx, `INSERT INTO object_kv(object, key, value) VALUES($1, $2, $3)
					ON CONFLICT(object, key) DO UPDATE SET value = excluded.value`, object, []byte(w.Key), nonNil(w.Value))
			}
			if err != nil {
				return err
			}
			if i == 0 {
				failpoint.Hit(FailpointObjectCommit)
			}
		}
		return nil
	})
	if err != nil {
		return fail(ctx, err, "storage commit")
	}
	return nil
}

// nonNil keeps an empty value a value: pgx sends a nil []byte as NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (s *Store) ObjectDeleteAll(ctx context.Context, object string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM object_kv WHERE object = $1`, object); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM object_alarms WHERE object = $1`, object)
		return err
	})
	if err != nil {
		return fail(ctx, err, "delete storage of "+object)
	}
	return nil
}

const alarmCols = `object, at, scheduled, attempts, seq`

func scanAlarm(sc interface{ Scan(...any) error }) (store.ObjectAlarm, error) {
	var a store.ObjectAlarm
	if err := sc.Scan(&a.Object, &a.At, &a.Scheduled, &a.Attempts, &a.Seq); err != nil {
		return a, err
	}
	a.At, a.Scheduled = a.At.Local(), a.Scheduled.Local()
	return a, nil
}

func (s *Store) SetObjectAlarm(ctx context.Context, object string, at time.Time) (store.ObjectAlarm, error) {
	var a store.ObjectAlarm
	err := s.retry(ctx, func() (err error) {
		a, err = scanAlarm(s.pool.QueryRow(ctx, `INSERT INTO object_alarms(object, at, scheduled, attempts, seq)
			VALUES($1, $2, $2, 0, nextval('object_alarm_seq'))
			ON CONFLICT(object) DO UPDATE SET at = excluded.at, scheduled = excluded.scheduled, attempts = 0, seq = excluded.seq
			RETURNING `+alarmCols, object, ms(at)))
		return err
	})
	if err != nil {
		return store.ObjectAlarm{}, fail(ctx, err, "set alarm")
	}
	return a, nil
}

func (s *Store) GetObjectAlarm(ctx context.Context, object string) (store.ObjectAlarm, bool, error) {
	var a store.ObjectAlarm
	err := s.retry(ctx, func() (err error) {
		a, err = scanAlarm(s.pool.QueryRow(ctx, `SELECT `+alarmCols+` FROM object_alarms WHERE object = $1`, object))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ObjectAlarm{}, false, nil
	}
	if err != nil {
		return a, false, fail(ctx, err, "get alarm")
	}
	return a, true, nil
}

func (s *Store) DeleteObjectAlarm(ctx context.Context, object string) error {
	if _, err := s.exec(ctx, `DELETE FROM object_alarms WHERE object = $1`, object); err != nil {
		return fail(ctx, err, "delete alarm")
	}
	return nil
}

func (s *Store) DueObjectAlarms(ctx context.Context, now time.Time, limit int) ([]store.ObjectAlarm, error) {
	if limit <= 0 {
		limit = 1000
	}
	var out []store.ObjectAlarm
	err := s.retry(ctx, func() error {
		out = nil
		rows, err := s.pool.Query(ctx, `SELECT `+alarmCols+` FROM object_alarms WHERE at <= $1 ORDER BY at, object LIMIT $2`, now, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAlarm(rows)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "due alarms")
	}
	return out, nil
}

// AttemptObjectAlarm is the claim on a delivery. Beyond the SQLite
// store's condition (the alarm is still seq) it requires the alarm to be
// due by the server's clock: the first attempt moves it to retryAt, so a
// second process that listed the same due alarm finds it no longer due
// and does not deliver it too. The UPDATE's row lock orders two attempts
// that arrive together; the later one re-checks against the moved row.
// retryAt is the caller's clock; if that runs so far behind the server's
// that retryAt is already past, the alarm moves a second past the
// server's now instead, or the claim would claim nothing.
func (s *Store) AttemptObjectAlarm(ctx context.Context, object string, seq int64, retryAt time.Time) (int, bool, error) {
	var n int
	err := s.queryRow(ctx, `UPDATE object_alarms SET attempts = attempts + 1,
			at = GREATEST($1, `+serverNow+` + interval '1 second')
		WHERE object = $2 AND seq = $3 AND at <= clock_timestamp() RETURNING attempts`,
		[]any{ms(retryAt), object, seq}, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fail(ctx, err, "alarm attempt")
	}
	return n, true, nil
}

func (s *Store) DeferObjectAlarm(ctx context.Context, object string, seq int64, at time.Time) error {
	if _, err := s.exec(ctx, `UPDATE object_alarms SET at = $1 WHERE object = $2 AND seq = $3`, ms(at), object, seq); err != nil {
		return fail(ctx, err, "defer alarm")
	}
	return nil
}

func (s *Store) ClearObjectAlarm(ctx context.Context, object string, seq int64) error {
	if _, err := s.exec(ctx, `DELETE FROM object_alarms WHERE object = $1 AND seq = $2`, object, seq); err != nil {
		return fail(ctx, err, "clear alarm")
	}
	return nil
}

func (s *Store) Begin(ctx context.Context, e store.JournalEntry) (store.JournalEntry, error) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if e.Status == "" {
		e.Status = store.OpPending
	}
	err := s.queryRow(ctx, `INSERT INTO journal(sandbox, op, key, detail, at, args, status, result, error, finished)
		VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING seq`,
		[]any{e.Sandbox, e.Op, nullable(e.Key), e.Detail, ms(e.At), e.Args, e.Status, e.Result, e.Error, ms(e.Finished)}, &e.Seq)
	if isDuplicate(err) {
		prev, gerr := s.JournalByKey(ctx, e.Key)
		if gerr != nil {
			return e, gerr
		}
		return prev, errdefs.AlreadyExists("journal key %q already recorded", e.Key)
	}
	if err != nil {
		return e, fail(ctx, err, "append journal")
	}
	return e, nil
}

func (s *Store) Finish(ctx context.Context, seq int64, status, result, errMsg string, at time.Time) error {
	tag, err := s.exec(ctx, `UPDATE journal SET status = $1, result = $2, error = $3, finished = $4 WHERE seq = $5`,
		status, result, errMsg, ms(at), seq)
	if err != nil {
		return fail(ctx, err, "finish journal entry "+strconv.FormatInt(seq, 10))
	}
	if tag.RowsAffected() != 1 {
		return errdefs.NotFound("journal entry %d not found", seq)
	}
	return nil
}

const journalCols = `seq, sandbox, op, COALESCE(key, ''), detail, at, args, status, result, error, finished`

func scanJournal(sc interface{ Scan(...any) error }) (store.JournalEntry, error) {
	var e store.JournalEntry
	var fin *time.Time
	if err := sc.Scan(&e.Seq, &e.Sandbox, &e.Op, &e.Key, &e.Detail, &e.At, &e.Args, &e.Status, &e.Result, &e.Error, &fin); err != nil {
		return e, err
	}
	e.At = e.At.Local()
	if fin != nil {
		e.Finished = fin.Local()
	}
	return e, nil
}

func (s *Store) JournalByKey(ctx context.Context, key string) (store.JournalEntry, error) {
	var e store.JournalEntry
	err := s.retry(ctx, func() (err error) {
		e, err = scanJournal(s.pool.QueryRow(ctx, `SELECT `+journalCols+` FROM journal WHERE key = $1`, key))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return e, errdefs.NotFound("no journal entry with key %q", key)
	}
	if err != nil {
		return e, fail(ctx, err, "read journal")
	}
	return e, nil
}

func (s *Store) PruneJournal(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.exec(ctx, `DELETE FROM journal WHERE at < $1`, before)
	if err != nil {
		return 0, fail(ctx, err, "prune journal")
	}
	return tag.RowsAffected(), nil
}

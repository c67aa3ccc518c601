package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Expiry is judged by the server's clock (now()), so every process of a
// cluster agrees on whether a snapshot or backup is still there, whatever
// its own clock says. ExpiredSnapshots takes the caller's time, as its
// contract says.

var _ store.Artifacts = (*Store)(nil)

func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) error {
	doc, err := json.Marshal(sn)
	if err != nil {
		return errdefs.Internal("encode snapshot %s: %w", sn.ID, err)
	}
	_, err = s.exec(ctx, `INSERT INTO snapshots(id, name, sandbox, created_at, expires_at, doc) VALUES($1, $2, $3, $4, $5, $6)`,
		sn.ID, sn.Name, sn.Sandbox, ms(sn.CreatedAt), ms(sn.ExpiresAt), string(doc))
	if isDuplicate(err) {
		return errdefs.AlreadyExists("snapshot %s already recorded", sn.ID)
	}
	if err != nil {
		return fail(ctx, err, "record snapshot "+sn.ID)
	}
	return nil
}

func decodeSnapshot(doc string, exp time.Time) (store.Snapshot, error) {
	var sn store.Snapshot
	if err := json.Unmarshal([]byte(doc), &sn); err != nil {
		return sn, errdefs.Internal("corrupt snapshot record: %w", err)
	}
	sn.ExpiresAt = exp.UTC()
	return sn, nil
}

func (s *Store) GetSnapshot(ctx context.Context, id string) (store.Snapshot, error) {
	var doc string
	var exp time.Time
	err := s.queryRow(ctx, `SELECT doc, expires_at FROM snapshots WHERE id = $1 AND expires_at > now()`, []any{id}, &doc, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Snapshot{}, errdefs.NotFound("snapshot %s not found", id)
	}
	if err != nil {
		return store.Snapshot{}, fail(ctx, err, "get snapshot "+id)
	}
	return decodeSnapshot(doc, exp)
}

func (s *Store) querySnapshots(ctx context.Context, what, q string, args ...any) ([]store.Snapshot, error) {
	out := []store.Snapshot{}
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var doc string
			var exp time.Time
			if err := rows.Scan(&doc, &exp); err != nil {
				return err
			}
			sn, err := decodeSnapshot(doc, exp)
			if err != nil {
				return err
			}
			out = append(out, sn)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, what)
	}
	return out, nil
}

func (s *Store) ListSnapshots(ctx context.Context, sandbox, name string) ([]store.Snapshot, error) {
	return s.querySnapshots(ctx, "list snapshots", `SELECT doc, expires_at FROM snapshots
		WHERE ($1 = '' OR sandbox = $1) AND ($2 = '' OR name = $2) AND expires_at > now()
		ORDER BY created_at NULLS FIRST, id`, sandbox, name)
}

func (s *Store) ExpiredSnapshots(ctx context.Context, now time.Time) ([]store.Snapshot, error) {
	return s.querySnapshots(ctx, "list expired snapshots", `SELECT doc, expires_at FROM snapshots WHERE expires_at <= $1 ORDER BY expires_at, id`, now)
}

func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, `DELETE FROM snapshots WHERE id = $1`, id); err != nil {
		return fail(ctx, err, "delete snapshot "+id)
	}
	return nil
}

func (s *Store) TouchSnapshot(ctx context.Context, id string, expiresAt time.Time) error {
	tag, err := s.exec(ctx, `UPDATE snapshots SET expires_at = $1 WHERE id = $2`, ms(expiresAt), id)
	if err != nil {
		return fail(ctx, err, "renew snapshot "+id)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	return nil
}

func (s *Store) PutBackup(ctx context.Context, b store.Backup) error {
	doc, err := json.Marshal(b)
	if err != nil {
		return errdefs.Internal("encode backup %s: %w", b.ID, err)
	}
	_, err = s.exec(ctx, `INSERT INTO backups(id, sandbox, created_at, expires_at, doc) VALUES($1, $2, $3, $4, $5)`,
		b.ID, b.Sandbox, ms(b.CreatedAt), ms(b.ExpiresAt), string(doc))
	if isDuplicate(err) {
		return errdefs.AlreadyExists("backup %s already recorded", b.ID)
	}
	if err != nil {
		return fail(ctx, err, "record backup "+b.ID)
	}
	return nil
}

func (s *Store) GetBackup(ctx context.Context, id string) (store.Backup, error) {
	var doc string
	var exp time.Time
	var expired bool
	err := s.queryRow(ctx, `SELECT doc, expires_at, expires_at <= now() FROM backups WHERE id = $1`, []any{id}, &doc, &exp, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Backup{}, errdefs.NotFound("backup %s not found", id)
	}
	if err != nil {
		return store.Backup{}, fail(ctx, err, "get backup "+id)
	}
	var b store.Backup
	if err := json.Unmarshal([]byte(doc), &b); err != nil {
		return b, errdefs.Internal("corrupt backup record %s: %w", id, err)
	}
	if expired {
		return b, errdefs.Expired("backup %s expired at %s", id, exp.UTC().Format(time.RFC3339))
	}
	return b, nil
}

func (s *Store) ListBackups(ctx context.Context, sandbox string) ([]store.Backup, error) {
	out := []store.Backup{}
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT doc FROM backups WHERE ($1 = '' OR sandbox = $1) AND expires_at > now()
			ORDER BY created_at NULLS FIRST, id`, sandbox)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var doc string
			if err := rows.Scan(&doc); err != nil {
				return err
			}
			var b store.Backup
			if err := json.Unmarshal([]byte(doc), &b); err != nil {
				return errdefs.Internal("corrupt backup record: %w", err)
			}
			out = append(out, b)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "list backups")
	}
	return out, nil
}

func (s *Store) DeleteBackup(ctx context.Context, id string) error {
	if _, err := s.exec(ctx, `DELETE FROM backups WHERE id = $1`, id); err != nil {
		return fail(ctx, err, "delete backup "+id)
	}
	return nil
}

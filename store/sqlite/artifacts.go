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
)

const artifactSchema = `
CREATE TABLE IF NOT EXISTS snapshots (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL DEFAULT '',
	sandbox    TEXT NOT NULL DEFAULT '',
	expires_at INTEGER NOT NULL,
	doc        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS snapshots_sandbox ON snapshots(sandbox);
CREATE INDEX IF NOT EXISTS snapshots_expires ON snapshots(expires_at);
CREATE TABLE IF NOT EXISTS backups (
	id         TEXT PRIMARY KEY,
	sandbox    TEXT NOT NULL DEFAULT '',
	expires_at INTEGER NOT NULL,
	doc        TEXT NOT NULL
);
`

var _ store.Artifacts = (*Store)(nil)

func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) error {
	doc, _ := json.Marshal(sn)
	_, err := s.db.ExecContext(ctx, `INSERT INTO snapshots(id, name, sandbox, expires_at, doc) VALUES(?, ?, ?, ?, ?)`,
		sn.ID, sn.Name, sn.Sandbox, sn.ExpiresAt.UnixMilli(), string(doc))
	if err != nil {
		return fmt.Errorf("record snapshot %s: %w", sn.ID, err)
	}
	return nil
}

func (s *Store) GetSnapshot(ctx context.Context, id string) (store.Snapshot, error) {
	var doc string
	var exp int64
	err := s.db.QueryRowContext(ctx, `SELECT doc, expires_at FROM snapshots WHERE id = ?`, id).Scan(&doc, &exp)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && exp <= time.Now().UnixMilli()) {
		return store.Snapshot{}, errdefs.NotFound("snapshot %s not found", id)
	}
	if err != nil {
		return store.Snapshot{}, err
	}
	var sn store.Snapshot
	if err := json.Unmarshal([]byte(doc), &sn); err != nil {
		return sn, errdefs.Internal("corrupt snapshot record %s: %w", id, err)
	}
	sn.ExpiresAt = time.UnixMilli(exp).UTC()
	return sn, nil
}

func (s *Store) querySnapshots(ctx context.Context, q string, args ...any) ([]store.Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Snapshot{}
	for rows.Next() {
		var doc string
		var exp int64
		if err := rows.Scan(&doc, &exp); err != nil {
			return nil, err
		}
		var sn store.Snapshot
		if err := json.Unmarshal([]byte(doc), &sn); err != nil {
			return nil, errdefs.Internal("corrupt snapshot record: %w", err)
		}
		sn.ExpiresAt = time.UnixMilli(exp).UTC()
		out = append(out, sn)
	}
	return out, rows.Err()
}

func (s *Store) ListSnapshots(ctx context.Context, sandbox, name string) ([]store.Snapshot, error) {
	return s.querySnapshots(ctx, `SELECT doc, expires_at FROM snapshots
		WHERE (? = '' OR sandbox = ?) AND (? = '' OR name = ?) AND expires_at > ?
		ORDER BY json_extract(doc, '$.CreatedAt'), id`, sandbox, sandbox, name, name, time.Now().UnixMilli())
}

func (s *Store) ExpiredSnapshots(ctx context.Context, now time.Time) ([]store.Snapshot, error) {
	return s.querySnapshots(ctx, `SELECT doc, expires_at FROM snapshots WHERE expires_at <= ?`, now.UnixMilli())
}

func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	return err
}

func (s *Store) TouchSnapshot(ctx context.Context, id string, expiresAt time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET expires_at = ? WHERE id = ?`, expiresAt.UnixMilli(), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	return nil
}

func (s *Store) PutBackup(ctx context.Context, b store.Backup) error {
	doc, _ := json.Marshal(b)
	_, err := s.db.ExecContext(ctx, `INSERT INTO backups(id, sandbox, expires_at, doc) VALUES(?, ?, ?, ?)`,
		b.ID, b.Sandbox, b.ExpiresAt.UnixMilli(), string(doc))
	if err != nil {
		return fmt.Errorf("record backup %s: %w", b.ID, err)
	}
	return nil
}

func (s *Store) GetBackup(ctx context.Context, id string) (store.Backup, error) {
	var doc string
	var exp int64
	err := s.db.QueryRowContext(ctx, `SELECT doc, expires_at FROM backups WHERE id = ?`, id).Scan(&doc, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Backup{}, errdefs.NotFound("backup %s not found", id)
	}
	if err != nil {
		return store.Backup{}, err
	}
	var b store.Backup
	if err := json.Unmarshal([]byte(doc), &b); err != nil {
		return b, errdefs.Internal("corrupt backup record %s: %w", id, err)
	}
	if exp <= time.Now().UnixMilli() {
		return b, errdefs.Expired("backup %s expired at %s", id, time.UnixMilli(exp).UTC().Format(time.RFC3339))
	}
	return b, nil
}

func (s *Store) ListBackups(ctx context.Context, sandbox string) ([]store.Backup, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT doc FROM backups WHERE (? = '' OR sandbox = ?) AND expires_at > ?
		ORDER BY json_extract(doc, '$.CreatedAt'), id`, sandbox, sandbox, time.Now().UnixMilli())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Backup{}
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, err
		}
		var b store.Backup
		if err := json.Unmarshal([]byte(doc), &b); err != nil {
			return nil, errdefs.Internal("corrupt backup record: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

func (s *Store) DeleteBackup(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM backups WHERE id = ?`, id)
	return err
}

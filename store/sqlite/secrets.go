package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

const secretSchema = `
CREATE TABLE IF NOT EXISTS secrets (
	name       TEXT PRIMARY KEY,
	value      TEXT NOT NULL,
	updated_at INTEGER NOT NULL
);
`

var _ store.Secrets = (*Store)(nil)

func (s *Store) PutSecret(ctx context.Context, name, value string) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO secrets(name, value, updated_at) VALUES(?, ?, ?)
		 ON CONFLICT(name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		name, value, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("put secret %q: %w", name, err)
	}
	return nil
}

func (s *Store) GetSecret(ctx context.Context, name string) (string, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errdefs.NotFound("secret %q not found", name)
	}
	if err != nil {
		return "", fmt.Errorf("get secret %q: %w", name, err)
	}
	return v, nil
}

func (s *Store) ListSecrets(ctx context.Context) ([]store.SecretInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, updated_at FROM secrets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []store.SecretInfo{}
	for rows.Next() {
		var i store.SecretInfo
		var at int64
		if err := rows.Scan(&i.Name, &at); err != nil {
			return nil, err
		}
		i.UpdatedAt = time.UnixMilli(at).UTC()
		out = append(out, i)
	}
	return out, rows.Err()
}

func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete secret %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("secret %q not found", name)
	}
	return nil
}

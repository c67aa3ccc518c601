package postgres

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Secret values are stored as they are given (bytea, so any bytes
// survive): whoever can read the database can read them. See the threat
// model ("PostgreSQL").

func (s *Store) PutSecret(ctx context.Context, name, value string) error {
	_, err := s.exec(ctx, `INSERT INTO secrets(name, value, updated_at) VALUES($1, $2, now())
		ON CONFLICT(name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		name, []byte(value))
	if err != nil {
		return fail(ctx, err, "put secret "+strconv.Quote(name))
	}
	return nil
}

func (s *Store) GetSecret(ctx context.Context, name string) (string, error) {
	var v []byte
	err := s.queryRow(ctx, `SELECT value FROM secrets WHERE name = $1`, []any{name}, &v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errdefs.NotFound("secret %q not found", name)
	}
	if err != nil {
		return "", fail(ctx, err, "get secret "+strconv.Quote(name))
	}
	return string(v), nil
}

func (s *Store) ListSecrets(ctx context.Context) ([]store.SecretInfo, error) {
	out := []store.SecretInfo{}
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT name, updated_at FROM secrets ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i store.SecretInfo
			var at time.Time
			if err := rows.Scan(&i.Name, &at); err != nil {
				return err
			}
			i.UpdatedAt = at.UTC().Truncate(time.Millisecond)
			out = append(out, i)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "list secrets")
	}
	return out, nil
}

func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	tag, err := s.exec(ctx, `DELETE FROM secrets WHERE name = $1`, name)
	if err != nil {
		return fail(ctx, err, "delete secret "+strconv.Quote(name))
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("secret %q not found", name)
	}
	return nil
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

var _ store.Volumes = (*Store)(nil)

func decodeVolume(doc string, version int64) (store.Volume, error) {
	var v store.Volume
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return v, errdefs.Internal("corrupt volume record: %w", err)
	}
	v.Version = version
	return v, nil
}

func (s *Store) GetVolume(ctx context.Context, name string) (store.Volume, error) {
	var doc string
	var version int64
	err := s.queryRow(ctx, `SELECT doc, version FROM volumes WHERE name = $1`, []any{name}, &doc, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Volume{}, errdefs.NotFound("volume %q not found", name)
	}
	if err != nil {
		return store.Volume{}, fail(ctx, err, "get volume "+strconv.Quote(name))
	}
	return decodeVolume(doc, version)
}

func (s *Store) ListVolumes(ctx context.Context) ([]store.Volume, error) {
	out := []store.Volume{}
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT doc, version FROM volumes ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var doc string
			var version int64
			if err := rows.Scan(&doc, &version); err != nil {
				return err
			}
			v, err := decodeVolume(doc, version)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "list volumes")
	}
	return out, nil
}

func (s *Store) PutVolume(ctx context.Context, v store.Volume) (int64, error) {
	old := v.Version
	v.Version = old + 1
	doc, err := json.Marshal(v)
	if err != nil {
		return 0, errdefs.Internal("encode volume %q: %w", v.Name, err)
	}
	if old == 0 {
		_, err := s.exec(ctx, `INSERT INTO volumes(name, version, doc) VALUES($1, $2, $3)`, v.Name, v.Version, string(doc))
		if isDuplicate(err) {
			return 0, errdefs.AlreadyExists("volume %q already exists", v.Name)
		}
		if err != nil {
			return 0, fail(ctx, err, "insert volume "+strconv.Quote(v.Name))
		}
		return v.Version, nil
	}
	tag, err := s.exec(ctx, `UPDATE volumes SET version = $1, doc = $2 WHERE name = $3 AND version = $4`, v.Version, string(doc), v.Name, old)
	if err != nil {
		return 0, fail(ctx, err, "update volume "+strconv.Quote(v.Name))
	}
	if tag.RowsAffected() != 1 {
		return 0, errdefs.FailedPrecondition("volume %q was changed concurrently (version %d)", v.Name, old)
	}
	return v.Version, nil
}

func (s *Store) DeleteVolume(ctx context.Context, name string, version int64) error {
	tag, err := s.exec(ctx, `DELETE FROM volumes WHERE name = $1 AND version = $2`, name, version)
	if err != nil {
		return fail(ctx, err, "delete volume "+strconv.Quote(name))
	}
	if tag.RowsAffected() == 0 {
		var cur int64
		if err := s.queryRow(ctx, `SELECT version FROM volumes WHERE name = $1`, []any{name}, &cur); err == nil {
			return errdefs.FailedPrecondition("volume %q was changed concurrently (version %d, now %d)", name, version, cur)
		}
	}
	return nil
}

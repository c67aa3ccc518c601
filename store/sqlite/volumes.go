package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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
	err := s.db.QueryRowContext(ctx, `SELECT doc, version FROM volumes WHERE name = ?`, name).Scan(&doc, &version)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Volume{}, errdefs.NotFound("volume %q not found", name)
	}
	if err != nil {
		return store.Volume{}, fmt.Errorf("get volume %q: %w", name, err)
	}
	return decodeVolume(doc, version)
}

func (s *Store) ListVolumes(ctx context.Context) ([]store.Volume, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT doc, version FROM volumes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	out := []store.Volume{}
	for rows.Next() {
		var doc string
		var version int64
		if err := rows.Scan(&doc, &version); err != nil {
			return nil, err
		}
		v, err := decodeVolume(doc, version)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (s *Store) PutVolume(ctx context.Context, v store.Volume) (int64, error) {
	old := v.Version
	v.Version = old + 1
	doc, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	if old == 0 {
		_, err := s.db.ExecContext(ctx, `INSERT INTO volumes(name, version, doc) VALUES(?, ?, ?)`, v.Name, v.Version, string(doc))
		if err != nil {
			if isDuplicate(err) {
				return 0, errdefs.AlreadyExists("volume %q already exists", v.Name)
			}
			return 0, fmt.Errorf("insert volume %q: %w", v.Name, err)
		}
		return v.Version, nil
	}
	res, err := s.db.ExecContext(ctx, `UPDATE volumes SET version = ?, doc = ? WHERE name = ? AND version = ?`, v.Version, string(doc), v.Name, old)
	if err != nil {
		return 0, fmt.Errorf("update volume %q: %w", v.Name, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return 0, errdefs.FailedPrecondition("volume %q was changed concurrently (version %d)", v.Name, old)
	}
	return v.Version, nil
}

func (s *Store) DeleteVolume(ctx context.Context, name string, version int64) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM volumes WHERE name = ? AND version = ?`, name, version)
	if err != nil {
		return fmt.Errorf("delete volume %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var cur int64
		if err := s.db.QueryRowContext(ctx, `SELECT version FROM volumes WHERE name = ?`, name).Scan(&cur); err == nil {
			return errdefs.FailedPrecondition("volume %q was changed concurrently (version %d, now %d)", name, version, cur)
		}
	}
	return nil
}

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

var _ store.Cluster = (*Store)(nil)

// Now is this host's clock: on one host the store and its only node share
// it.
func (s *Store) Now(context.Context) (time.Time, error) {
	return time.Now().UTC().Truncate(time.Millisecond), nil
}

func (s *Store) PutNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == "" {
		return store.Node{}, errdefs.InvalidArgument("node entry without a name")
	}
	now, _ := s.Now(ctx)
	t, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Node{}, fmt.Errorf("put node %q: %w", n.Name, err)
	}
	defer t.Rollback()
	var epoch, started, draining int64
	err = t.QueryRowContext(ctx, `SELECT epoch, started_at, draining FROM nodes WHERE name = ?`, n.Name).
		Scan(&epoch, &started, &draining)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		epoch, draining = 1, 0
	case err != nil:
		return store.Node{}, fmt.Errorf("put node %q: %w", n.Name, err)
	case started != ms(n.StartedAt):
		epoch++ // the process restarted: a new join
	}
	n.Epoch, n.Draining, n.Heartbeat = epoch, draining != 0, now
	doc, err := json.Marshal(n)
	if err != nil {
		return store.Node{}, errdefs.Internal("encode node %q: %w", n.Name, err)
	}
	if _, err := t.ExecContext(ctx,
		`INSERT INTO nodes(name, epoch, started_at, heartbeat, draining, doc) VALUES(?, ?, ?, ?, ?, ?)
		 ON CONFLICT(name) DO UPDATE SET epoch = excluded.epoch, started_at = excluded.started_at,
		 heartbeat = excluded.heartbeat, doc = excluded.doc`,
		n.Name, epoch, ms(n.StartedAt), ms(now), draining, string(doc)); err != nil {
		return store.Node{}, fmt.Errorf("put node %q: %w", n.Name, err)
	}
	if err := t.Commit(); err != nil {
		return store.Node{}, fmt.Errorf("put node %q: %w", n.Name, err)
	}
	return n, nil
}

const nodeColumns = `epoch, heartbeat, draining, doc`

func scanNode(sc interface{ Scan(...any) error }) (store.Node, error) {
	var epoch, heartbeat, draining int64
	var doc string
	if err := sc.Scan(&epoch, &heartbeat, &draining, &doc); err != nil {
		return store.Node{}, err
	}
	var n store.Node
	if err := json.Unmarshal([]byte(doc), &n); err != nil {
		return store.Node{}, errdefs.Internal("corrupt node entry: %w", err)
	}
	n.Epoch, n.Heartbeat, n.Draining = epoch, time.UnixMilli(heartbeat).UTC(), draining != 0
	return n, nil
}

func (s *Store) Nodes(ctx context.Context) ([]store.Node, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	n, err := scanNode(s.db.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Node{}, errdefs.NotFound("node %q is not a member of this cluster", name)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("get node %q: %w", name, err)
	}
	return n, nil
}

func (s *Store) SetNodeDraining(ctx context.Context, name string, draining bool) error {
	v := 0
	if draining {
		v = 1
	}
	r, err := s.db.ExecContext(ctx, `UPDATE nodes SET draining = ? WHERE name = ?`, v, name)
	if err != nil {
		return fmt.Errorf("drain node %q: %w", name, err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return errdefs.NotFound("node %q is not a member of this cluster", name)
	}
	return nil
}

func (s *Store) DeleteNode(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM nodes WHERE name = ?`, name); err != nil {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	return nil
}

func (s *Store) AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (store.Lease, error) {
	if key == "" || holder == "" || ttl <= 0 {
		return store.Lease{}, errdefs.InvalidArgument("lease needs a key, a holder and a positive ttl (got %q, %q, %s)", key, holder, ttl)
	}
	now, _ := s.Now(ctx)
	t, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %q: %w", key, err)
	}
	defer t.Rollback()
	cur := store.Lease{Key: key}
	var expires int64
	err = t.QueryRowContext(ctx, `SELECT holder, epoch, expires FROM leases WHERE key = ?`, key).
		Scan(&cur.Holder, &cur.Epoch, &expires)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, fmt.Errorf("acquire lease %q: %w", key, err)
	}
	cur.Expires = time.UnixMilli(expires).UTC()
	next := store.Lease{Key: key, Holder: holder, Epoch: cur.Epoch, Expires: now.Add(ttl)}
	switch {
	case cur.Holder == holder:
		// A renewal by the holder (expired or not: nobody took it).
	case cur.Holder == "" || !cur.Expires.After(now):
		next.Epoch = cur.Epoch + 1
	default:
		return cur, errdefs.AlreadyExists("lease %q is held by %s (epoch %d) until %s",
			key, cur.Holder, cur.Epoch, cur.Expires.Format(time.RFC3339Nano))
	}
	if _, err := t.ExecContext(ctx,
		`INSERT INTO leases(key, holder, epoch, expires) VALUES(?, ?, ?, ?)
		 ON CONFLICT(key) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, expires = excluded.expires`,
		key, holder, next.Epoch, ms(next.Expires)); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %q: %w", key, err)
	}
	if err := t.Commit(); err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease %q: %w", key, err)
	}
	return next, nil
}

func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if ttl <= 0 {
		return store.Lease{}, errdefs.InvalidArgument("renew lease %q: ttl must be positive, got %s", l.Key, ttl)
	}
	now, _ := s.Now(ctx)
	l.Expires = now.Add(ttl)
	r, err := s.db.ExecContext(ctx, `UPDATE leases SET expires = ? WHERE key = ? AND holder = ? AND holder != '' AND epoch = ?`,
		ms(l.Expires), l.Key, l.Holder, l.Epoch)
	if err != nil {
		return store.Lease{}, fmt.Errorf("renew lease %q: %w", l.Key, err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return store.Lease{}, errdefs.FailedPrecondition("lease %q is no longer held by %s at epoch %d", l.Key, l.Holder, l.Epoch)
	}
	return l, nil
}

func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE leases SET holder = '', expires = 0 WHERE key = ? AND holder = ? AND epoch = ?`,
		l.Key, l.Holder, l.Epoch); err != nil {
		return fmt.Errorf("release lease %q: %w", l.Key, err)
	}
	return nil
}

func (s *Store) GetLease(ctx context.Context, key string) (store.Lease, error) {
	l := store.Lease{Key: key}
	var expires int64
	err := s.db.QueryRowContext(ctx, `SELECT holder, epoch, expires FROM leases WHERE key = ? AND holder != ''`, key).
		Scan(&l.Holder, &l.Epoch, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Lease{}, errdefs.NotFound("lease %q is not held", key)
	}
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease %q: %w", key, err)
	}
	l.Expires = time.UnixMilli(expires).UTC()
	return l, nil
}

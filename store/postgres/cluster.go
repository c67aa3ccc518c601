package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Every time here is the server's: heartbeats and expiries are computed
// and compared in SQL with clock_timestamp() (the time the statement runs,
// not the start of its transaction), truncated to milliseconds as the
// SQLite store keeps them. Each change is one statement, so its check and
// its write are atomic: the row lock orders racing processes and the later
// one re-checks against what the earlier one committed.
const serverNow = `date_trunc('milliseconds', clock_timestamp())`

func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.queryRow(ctx, `SELECT `+serverNow, nil, &t); err != nil {
		return time.Time{}, fail(ctx, err, "read the state store's clock")
	}
	return t.UTC(), nil
}

func (s *Store) PutNode(ctx context.Context, n store.Node) (store.Node, error) {
	if n.Name == "" {
		return store.Node{}, errdefs.InvalidArgument("node entry without a name")
	}
	n.StartedAt = n.StartedAt.UTC().Truncate(time.Millisecond)
	// The columns hold what the store decides (epoch, heartbeat,
	// draining); the document holds what the node says.
	rest := n
	rest.Epoch, rest.Heartbeat, rest.Draining = 0, time.Time{}, false
	doc, err := json.Marshal(rest)
	if err != nil {
		return store.Node{}, errdefs.Internal("encode node %q: %w", n.Name, err)
	}
	err = s.queryRow(ctx, `INSERT INTO nodes(name, epoch, started_at, heartbeat, draining, doc)
		VALUES($1, 1, $2, `+serverNow+`, false, $3)
		ON CONFLICT(name) DO UPDATE SET
			epoch = CASE WHEN nodes.started_at = excluded.started_at THEN nodes.epoch ELSE nodes.epoch + 1 END,
			started_at = excluded.started_at, heartbeat = excluded.heartbeat, doc = excluded.doc
		RETURNING epoch, heartbeat, draining`, []any{n.Name, n.StartedAt, string(doc)},
		&n.Epoch, &n.Heartbeat, &n.Draining)
	if err != nil {
		return store.Node{}, fail(ctx, err, "put node "+strconv.Quote(n.Name))
	}
	n.Heartbeat = n.Heartbeat.UTC()
	return n, nil
}

const nodeCols = `epoch, started_at, heartbeat, draining, doc`

func scanNode(sc interface{ Scan(...any) error }) (store.Node, error) {
	var n store.Node
	var epoch int64
	var started, heartbeat time.Time
	var draining bool
	var doc string
	if err := sc.Scan(&epoch, &started, &heartbeat, &draining, &doc); err != nil {
		return n, err
	}
	if err := json.Unmarshal([]byte(doc), &n); err != nil {
		return n, errdefs.Internal("corrupt node entry: %w", err)
	}
	n.Epoch, n.StartedAt, n.Heartbeat, n.Draining = epoch, started.UTC(), heartbeat.UTC(), draining
	return n, nil
}

func (s *Store) Nodes(ctx context.Context) ([]store.Node, error) {
	out := []store.Node{}
	err := s.retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			n, err := scanNode(rows)
			if err != nil {
				return err
			}
			out = append(out, n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "list nodes")
	}
	return out, nil
}

func (s *Store) GetNode(ctx context.Context, name string) (store.Node, error) {
	var n store.Node
	err := s.retry(ctx, func() (err error) {
		n, err = scanNode(s.pool.QueryRow(ctx, `SELECT `+nodeCols+` FROM nodes WHERE name = $1`, name))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Node{}, errdefs.NotFound("node %q is not a member of this cluster", name)
	}
	if err != nil {
		return store.Node{}, fail(ctx, err, "get node "+strconv.Quote(name))
	}
	return n, nil
}

func (s *Store) SetNodeDraining(ctx context.Context, name string, draining bool) error {
	tag, err := s.exec(ctx, `UPDATE nodes SET draining = $1 WHERE name = $2`, draining, name)
	if err != nil {
		return fail(ctx, err, "drain node "+strconv.Quote(name))
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("node %q is not a member of this cluster", name)
	}
	return nil
}

func (s *Store) DeleteNode(ctx context.Context, name string) error {
	if _, err := s.exec(ctx, `DELETE FROM nodes WHERE name = $1`, name); err != nil {
		return fail(ctx, err, "delete node "+strconv.Quote(name))
	}
	return nil
}

// ttlMillis is a lease duration as the SQL below takes it.
func ttlMillis(ttl time.Duration) float64 { return float64(max(ttl.Milliseconds(), 1)) }

func (s *Store) AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (store.Lease, error) {
	if key == "" || holder == "" || ttl <= 0 {
		return store.Lease{}, errdefs.InvalidArgument("lease needs a key, a holder and a positive ttl (got %q, %q, %s)", key, holder, ttl)
	}
	// One statement takes the lease if it is free ('' after a release),
	// expired, or already the holder's (a renewal keeps the epoch; any
	// change of holder bumps it past every epoch the key had). When it
	// takes nothing, the current lease is read for the error; if that
	// read finds the lease freed meanwhile, try again.
	for attempt := 0; ; attempt++ {
		l := store.Lease{Key: key}
		err := s.queryRow(ctx, `INSERT INTO leases(key, holder, epoch, expires)
			VALUES($1, $2, 1, `+serverNow+` + $3::float8 * interval '1 millisecond')
			ON CONFLICT(key) DO UPDATE SET
				epoch = CASE WHEN leases.holder = excluded.holder THEN leases.epoch ELSE leases.epoch + 1 END,
				holder = excluded.holder, expires = excluded.expires
			WHERE leases.holder = excluded.holder OR leases.holder = '' OR leases.expires <= clock_timestamp()
			RETURNING holder, epoch, expires`, []any{key, holder, ttlMillis(ttl)}, &l.Holder, &l.Epoch, &l.Expires)
		if err == nil {
			l.Expires = l.Expires.UTC()
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return store.Lease{}, fail(ctx, err, "acquire lease "+strconv.Quote(key))
		}
		cur := store.Lease{Key: key}
		var live bool
		err = s.queryRow(ctx, `SELECT holder, epoch, expires, holder != '' AND expires > clock_timestamp() FROM leases WHERE key = $1`,
			[]any{key}, &cur.Holder, &cur.Epoch, &cur.Expires, &live)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return store.Lease{}, fail(ctx, err, "acquire lease "+strconv.Quote(key))
		}
		if err == nil && (live || attempt == 2) {
			cur.Expires = cur.Expires.UTC()
			return cur, errdefs.AlreadyExists("lease %q is held by %s (epoch %d) until %s",
				key, cur.Holder, cur.Epoch, cur.Expires.Format(time.RFC3339Nano))
		}
		if attempt == 2 {
			return store.Lease{}, errdefs.Unavailable("acquire lease %q: it kept changing hands; retry", key)
		}
	}
}

func (s *Store) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if ttl <= 0 {
		return store.Lease{}, errdefs.InvalidArgument("renew lease %q: ttl must be positive, got %s", l.Key, ttl)
	}
	// Expired but not taken still counts as held: no expiry check here.
	err := s.queryRow(ctx, `UPDATE leases SET expires = `+serverNow+` + $1::float8 * interval '1 millisecond'
		WHERE key = $2 AND holder = $3 AND holder != '' AND epoch = $4 RETURNING expires`,
		[]any{ttlMillis(ttl), l.Key, l.Holder, l.Epoch}, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, errdefs.FailedPrecondition("lease %q is no longer held by %s at epoch %d", l.Key, l.Holder, l.Epoch)
	}
	if err != nil {
		return store.Lease{}, fail(ctx, err, "renew lease "+strconv.Quote(l.Key))
	}
	l.Expires = l.Expires.UTC()
	return l, nil
}

func (s *Store) ReleaseLease(ctx context.Context, l store.Lease) error {
	// The row stays with its epoch, so the next holder's is higher.
	if _, err := s.exec(ctx, `UPDATE leases SET holder = '', expires = 'epoch' WHERE key = $1 AND holder = $2 AND epoch = $3`,
		l.Key, l.Holder, l.Epoch); err != nil {
		return fail(ctx, err, "release lease "+strconv.Quote(l.Key))
	}
	return nil
}

func (s *Store) GetLease(ctx context.Context, key string) (store.Lease, error) {
	l := store.Lease{Key: key}
	err := s.queryRow(ctx, `SELECT holder, epoch, expires FROM leases WHERE key = $1 AND holder != ''`, []any{key},
		&l.Holder, &l.Epoch, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Lease{}, errdefs.NotFound("lease %q is not held", key)
	}
	if err != nil {
		return store.Lease{}, fail(ctx, err, "get lease "+strconv.Quote(key))
	}
	l.Expires = l.Expires.UTC()
	return l, nil
}

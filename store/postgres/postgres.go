package postgres

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// Store is a PostgreSQL-backed store.Store, store.Secrets and
// store.Cluster. It is safe for concurrent use, also by several processes
// on one database.
type Store struct {
	pool       *pgxpool.Pool
	addr       string       // host:port of the server, for messages (never the DSN)
	unverified bool         // some way to a remote server lacks verified TLS
	retries    atomic.Int64 // calls run again (see retry)
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Secrets = (*Store)(nil)
	_ store.Cluster = (*Store)(nil)
)

// Defaults for what the DSN does not set. Connecting must fail fast when
// the server is unreachable (a partition makes the node refuse work, not
// hang); a berth process needs a handful of connections, not one per
// request.
const (
	defaultConnectTimeout = 5 * time.Second
	defaultMaxConns       = 16
)

// Open connects to the database named by dsn (a postgres:// URL or a
// key=value string, as libpq takes), checks that it answers and migrates
// its schema. The DSN holds a password: it is never part of an error or a
// log line; errors name the server by host and port only.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// No cause: pgx's parse errors quote the DSN, and its redaction
		// of the password is best effort.
		return nil, errdefs.InvalidArgument("the PostgreSQL DSN does not parse (it is not shown: it may hold a password); want postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=... or host=... user=... dbname=...")
	}
	if !strings.Contains(dsn, "connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	cfg.ConnConfig.DialFunc = dialer(cfg.ConnConfig.ConnectTimeout).DialContext
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "berth"
	}
	s := &Store{addr: serverAddr(cfg.ConnConfig.Config), unverified: unverified(cfg.ConnConfig.Config)}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errdefs.InvalidArgument("PostgreSQL at %s: %v", s.addr, err)
	}
	if err := s.pool.Ping(ctx); err != nil {
		s.pool.Close()
		return nil, errdefs.New(kindOf(ctx, err), "cannot connect to the state store, PostgreSQL at %s: %w", s.addr, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.pool.Close()
		return nil, fail(ctx, err, "migrate the state store (PostgreSQL at "+s.addr+")")
	}
	return s, nil
}

// A connection to a server that stops answering (a partition that drops
// packets, a host that died without a reset) must fail in seconds, not
// after the kernel's retransmission timeout of a quarter of an hour:
// keepalive probes notice a silent peer, and TCP_USER_TIMEOUT bounds how
// long sent data (a query, a probe) may stay unacknowledged. Variables so
// the partition test can shorten them.
var (
	keepAliveIdle  = 5 * time.Second
	tcpUserTimeout = 20 * time.Second
)

func dialer(connectTimeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: connectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveIdle, Count: 3,
		},
		Control: func(network, _ string, c syscall.RawConn) error {
			if !strings.HasPrefix(network, "tcp") {
				return nil // a unix socket
			}
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(tcpUserTimeout.Milliseconds()))
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}

// serverAddr names the server (and its fallbacks) as host:port.
func serverAddr(c pgconn.Config) string {
	addrs := []string{hostPort(c.Host, c.Port)}
	seen := map[string]bool{addrs[0]: true}
	for _, f := range c.Fallbacks { // sslmode=prefer repeats each host
		if a := hostPort(f.Host, f.Port); !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ", ")
}

func hostPort(host string, port uint16) string {
	if strings.HasPrefix(host, "/") { // a unix socket directory
		return host + "/.s.PGSQL." + strconv.Itoa(int(port))
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// Retries counts the calls the store ran again after a serialization
// failure, a deadlock or a connection found dead before use: a figure
// for the operator (contention between processes) and for the tests that
// provoke it.
func (s *Store) Retries() int64 { return s.retries.Load() }

// UnverifiedTLS reports whether a connection to a server that is not on
// this machine may go without TLS or with a certificate whose host name is
// not checked (any sslmode but verify-full): whoever is on the path could
// then read and change all of berth's state. The daemon warns about it.
func (s *Store) UnverifiedTLS() bool { return s.unverified }

func unverified(c pgconn.Config) bool {
	check := func(host string, t *tls.Config) bool {
		if strings.HasPrefix(host, "/") || host == "localhost" {
			return false // a unix socket, or loopback by name
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return false
		}
		return t == nil || t.InsecureSkipVerify
	}
	if check(c.Host, c.TLSConfig) {
		return true
	}
	for _, f := range c.Fallbacks {
		if check(f.Host, f.TLSConfig) {
			return true
		}
	}
	return false
}

// Addr is the server's host:port (for log lines; never the DSN).
func (s *Store) Addr() string { return s.addr }

func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// ms keeps a time at the millisecond precision the SQLite store keeps, so
// both stores hand back the same values; the zero time stays zero (NULL).
func ms(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.Truncate(time.Millisecond)
	return &t
}

// exec runs one statement with retries and returns its command tag.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() error {
		var err error
		tag, err = s.pool.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// queryRow runs a one-row query with retries and scans it into dest.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return s.retry(ctx, func() error { return s.pool.QueryRow(ctx, sql, args...).Scan(dest...) })
}

// inTx runs fn in one transaction, retried as a whole on a serialization
// failure or deadlock.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return s.retry(ctx, func() error { return pgx.BeginFunc(ctx, s.pool, fn) })
}

// decode is store.DecodeSandbox: the record format both stores share.
var decode = store.DecodeSandbox

func (s *Store) Get(ctx context.Context, name string) (store.Sandbox, error) {
	var doc string
	var version int64
	err := s.queryRow(ctx, `SELECT doc, version FROM sandboxes WHERE name = $1`, []any{name}, &doc, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	if err != nil {
		return store.Sandbox{}, fail(ctx, err, "get sandbox "+strconv.Quote(name))
	}
	return decode(doc, version)
}

func (s *Store) query(ctx context.Context, sql string, args ...any) ([]store.Sandbox, error) {
	var out []store.Sandbox
	err := s.retry(ctx, func() error {
		out = nil
		rows, err := s.pool.Query(ctx, sql, args...)
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
			sb, err := decode(doc, version)
			if err != nil {
				return err
			}
			out = append(out, sb)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "list sandboxes")
	}
	return out, nil
}

func (s *Store) List(ctx context.Context) ([]store.Sandbox, error) {
	return s.query(ctx, `SELECT doc, version FROM sandboxes ORDER BY name`)
}

func (s *Store) DueAlarms(ctx context.Context, now time.Time) ([]store.Sandbox, error) {
	return s.query(ctx, `SELECT doc, version FROM sandboxes WHERE sleep_at IS NOT NULL AND sleep_at <= $1 ORDER BY sleep_at, name`, now)
}

func (s *Store) Put(ctx context.Context, sb store.Sandbox) (int64, error) {
	old := sb.Version
	sb.Version = old + 1
	doc, err := json.Marshal(sb)
	if err != nil {
		return 0, errdefs.Internal("encode sandbox %q: %w", sb.Name, err)
	}
	if old == 0 {
		_, err := s.exec(ctx, `INSERT INTO sandboxes(name, state, sleep_at, version, doc) VALUES($1, $2, $3, $4, $5)`,
			sb.Name, sb.State, ms(sb.SleepAt), sb.Version, string(doc))
		if isDuplicate(err) {
			return 0, errdefs.AlreadyExists("sandbox %q already exists", sb.Name)
		}
		if err != nil {
			return 0, fail(ctx, err, "insert sandbox "+strconv.Quote(sb.Name))
		}
		return sb.Version, nil
	}
	// Conditional on the version the caller read: of racing writers the
	// row lock lets one through, and the others re-check the condition
	// against its committed row and update nothing.
	tag, err := s.exec(ctx, `UPDATE sandboxes SET state = $1, sleep_at = $2, version = $3, doc = $4 WHERE name = $5 AND version = $6`,
		sb.State, ms(sb.SleepAt), sb.Version, string(doc), sb.Name, old)
	if err != nil {
		return 0, fail(ctx, err, "update sandbox "+strconv.Quote(sb.Name))
	}
	if tag.RowsAffected() != 1 {
		return 0, errdefs.FailedPrecondition("sandbox %q was changed concurrently (version %d)", sb.Name, old)
	}
	return sb.Version, nil
}

func (s *Store) Delete(ctx context.Context, name string) error {
	if _, err := s.exec(ctx, `DELETE FROM sandboxes WHERE name = $1`, name); err != nil {
		return fail(ctx, err, "delete sandbox "+strconv.Quote(name))
	}
	return nil
}

// nullable turns "" into NULL (journal keys: many entries have none, and
// NULLs never collide in a UNIQUE column).
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Store) Append(ctx context.Context, e store.JournalEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	_, err := s.exec(ctx, `INSERT INTO journal(sandbox, op, key, detail, at) VALUES($1, $2, $3, $4, $5)`,
		e.Sandbox, e.Op, nullable(e.Key), e.Detail, ms(e.At))
	if isDuplicate(err) {
		return errdefs.AlreadyExists("journal key %q already recorded", e.Key)
	}
	if err != nil {
		return fail(ctx, err, "append journal")
	}
	return nil
}

func (s *Store) JournalAfter(ctx context.Context, afterSeq int64, limit int) ([]store.JournalEntry, error) {
	if limit <= 0 {
		limit = 1000
	}
	return s.queryJournal(ctx, `SELECT `+journalCols+` FROM journal WHERE seq > $1 ORDER BY seq LIMIT $2`, afterSeq, limit)
}

func (s *Store) Journal(ctx context.Context, sandbox string) ([]store.JournalEntry, error) {
	return s.queryJournal(ctx, `SELECT `+journalCols+` FROM journal WHERE sandbox = $1 ORDER BY seq`, sandbox)
}

// queryJournal runs a query of journal rows (journalCols), retried like
// every read.
func (s *Store) queryJournal(ctx context.Context, query string, args ...any) ([]store.JournalEntry, error) {
	var out []store.JournalEntry
	err := s.retry(ctx, func() error {
		out = nil
		rows, err := s.pool.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanJournal(rows)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fail(ctx, err, "read journal")
	}
	return out, nil
}

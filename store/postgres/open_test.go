package postgres

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestOpenUnreachable needs no server: a DSN whose server is not there
// fails Open at once as unavailable, naming the host and port and never
// the password.
func TestOpenUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	const password = "s3cret-Pw-9"
	t0 := time.Now()
	_, err = Open(context.Background(), "postgres://berth:"+password+"@"+addr+"/berth?sslmode=disable")
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) {
		t.Fatalf("Open of a DSN nobody serves: want unavailable, got %v", err)
	}
	if !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), password) {
		t.Fatalf("the error must name %s and never the password: %v", addr, err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("Open took %s to fail", d)
	}
	t.Logf("%v", err)
}

// TestOpenBadDSN: a DSN that does not parse is invalid argument, and the
// message quotes none of it (it may hold a password).
func TestOpenBadDSN(t *testing.T) {
	const password = "s3cret-Pw-9"
	for _, dsn := range []string{
		"postgres://berth:" + password + "@db.example:notaport/berth",
		"host=db.example password=" + password + " port=x",
	} {
		_, err := Open(context.Background(), dsn)
		if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) || strings.Contains(err.Error(), password) {
			t.Fatalf("Open(%q): want invalid argument without the password, got %v", dsn, err)
		}
	}
}

// TestUnverifiedTLS: only verify-full (or a server on this machine) counts
// as safe from whoever sits on the path to the database.
func TestUnverifiedTLS(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://b@db.example/berth":                                 true, // prefer: falls back to plaintext
		"postgres://b@db.example/berth?sslmode=require":                 true, // encrypted, server not verified
		"postgres://b@db.example/berth?sslmode=verify-ca":               true, // host name not checked
		"postgres://b@db.example/berth?sslmode=disable":                 true,
		"postgres://b@db.example/berth?sslmode=verify-full":             false,
		"postgres://b@127.0.0.1/berth?sslmode=disable":                  false,
		"postgres://b@localhost/berth":                                  false,
		"host=/var/run/postgresql user=b dbname=berth":                  false,
		"postgres://b@db.example,db2.example/berth?sslmode=verify-full": false,
		"postgres://b@127.0.0.1,db2.example/berth?sslmode=prefer":       true,
	} {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := unverified(*cfg); got != want {
			t.Errorf("%s: unverified = %v, want %v", dsn, got, want)
		}
	}
}

// TestServerAddr: messages name every server of a multi-host DSN once.
func TestServerAddr(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://b:pw@db1.example:5433,db2.example/berth")
	if err != nil {
		t.Fatal(err)
	}
	if got := serverAddr(*cfg); got != "db1.example:5433, db2.example:5432" {
		t.Fatalf("serverAddr = %q", got)
	}
}

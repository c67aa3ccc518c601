package pgtest

import (
	"context"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func query(t *testing.T, dsn string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// TestDB checks that a test database takes connections and is gone after
// its test.
func TestDB(t *testing.T) {
	var dsn string
	t.Run("inner", func(t *testing.T) {
		dsn = DB(t)
		if err := query(t, dsn); err != nil {
			t.Fatalf("fresh database: %v", err)
		}
	})
	if err := query(t, dsn); err == nil {
		t.Fatal("the test database is still there after its test ended")
	}
}

// TestStopStart checks that Stop ends the server by pid, that nothing
// answers on its port then, and that Start brings the same data back.
func TestStopStart(t *testing.T) {
	s := Start(t)
	dsn := s.NewDB(t)
	pid := s.Pid()
	if pid == 0 {
		t.Fatal("no pid for a running server")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("postmaster %d still exists after Stop: %v", pid, err)
	}
	if err := query(t, dsn); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := query(t, dsn); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	// The password is required: the same DSN without it is refused.
	if err := query(t, "postgres://postgres@"+s.base.Host+"/postgres"); err == nil {
		t.Fatal("the server took a connection without the password")
	}
}

// connectFrom opens dsn from the local address src, as a client on another
// host (or in a network namespace) would.
func connectFrom(t *testing.T, dsn, src string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	cfg.DialFunc = d.DialContext
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// TestLaunchListensWhereTold checks Launch's options: the server listens on
// the given address only, lets in the listed client ranges (with the
// password) and no others, CreateDB makes a database there, and Close
// stops it and removes its data dir. (127.0.0.0/8 is all loopback, so the
// test needs no network namespace.)
func TestLaunchListensWhereTold(t *testing.T) {
	if why := cannotStart(); why != "" {
		skip(t, why)
	}
	s, err := Launch(Options{Host: "127.0.0.2", Clients: []string{"127.0.0.3/32"}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close()
		}
	})
	if s.Host() != "127.0.0.2" {
		t.Fatalf("DSN host %q, want 127.0.0.2", s.Host())
	}
	dsn, err := s.CreateDB(context.Background(), "launch_db")
	if err != nil {
		t.Fatal(err)
	}
	if err := connectFrom(t, dsn, "127.0.0.3"); err != nil {
		t.Fatalf("a listed client range was refused: %v", err)
	}
	if err := connectFrom(t, dsn, "127.0.0.4"); err == nil {
		t.Fatal("a client outside the listed ranges and loopback's 127.0.0.1 got in")
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())), time.Second); err == nil {
		c.Close()
		t.Fatal("the server also listens on 127.0.0.1")
	}
	if _, err := s.CreateDB(context.Background(), "Bad-Name"); err == nil {
		t.Fatal("CreateDB took a name that needs quoting")
	}
	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close left the data dir %s: %v", dir, err)
	}
}

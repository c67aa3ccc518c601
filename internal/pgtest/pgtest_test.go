package pgtest

import (
	"context"
	"os"
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

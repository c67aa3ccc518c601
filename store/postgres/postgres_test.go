package postgres

import (
	"context"
	"os"
	"testing"

	"github.com/berth-sh/berth/internal/pgtest"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/storetest"
)

// One PostgreSQL server for the package (pgtest.Shared), one database per
// test; the tests that stop or restart a server start their own.
// A run with $PG_CRASH_HELPER_DSN set is TestCrashMidCommit's helper
// process, not a test run.
func TestMain(m *testing.M) {
	if dsn := os.Getenv(crashHelperEnv); dsn != "" {
		os.Exit(crashHelper(dsn))
	}
	os.Exit(pgtest.Main(m))
}

// open opens a store on a fresh database, closed when t ends.
func open(t *testing.T) *Store {
	t.Helper()
	return openDSN(t, pgtest.DB(t))
}

func openDSN(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store conformance suite, unchanged, against a
// real PostgreSQL server.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

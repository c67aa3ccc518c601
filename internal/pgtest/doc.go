// Package pgtest gives tests a real PostgreSQL server: Debian's postgresql
// package, started by the test itself into a temporary directory, never a
// fake. It is imported only by _test files.
//
// A test package shares one server (Shared, started on first use and
// stopped by Main at the end of the package) and takes a fresh database per
// test (DB). Tests that stop or restart the server start their own (Start).
// A suite whose clients are not on loopback (daemons in network namespaces)
// starts one from its TestMain with Launch, listening on the address it
// names and letting in the client ranges it lists, and makes its database
// with CreateDB.
// With $BERTH_TEST_PG_DSN set, Shared and DB use that server instead (its
// user needs CREATEDB); without it a test that is not root is skipped with
// a message saying what it needs, because the server runs as the system
// user postgres (PostgreSQL refuses to run as root). $BERTH_TEST_PG_REQUIRED
// turns those skips into failures (scripts/test.sh sets it as root).
package pgtest

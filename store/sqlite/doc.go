// Package sqlite implements store.Store on SQLite through the pure-Go
// modernc.org/sqlite driver (no cgo, so the berth binary stays easy to
// build). The database runs in WAL mode: readers never block the writer and
// a kill -9 of the daemon loses no committed transaction.
package sqlite

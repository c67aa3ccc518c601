// Package postgres implements the state store (store.Store, store.Secrets
// and store.Cluster) on PostgreSQL through pgx, for cluster mode: several
// berth processes share one database, so everything that must hold across
// processes is decided by the database, never by one process's memory.
//
//   - Optimistic versions are conditional UPDATEs (WHERE version = $old):
//     under READ COMMITTED a second writer waits for the first's row lock,
//     re-checks the condition against the committed row and finds the
//     version moved, so exactly one of any number of racing writers wins.
//   - Every time the cluster compares (node heartbeats, lease expiry) is
//     the database server's clock, so a node with a wrong clock can neither
//     keep itself alive nor make others look dead.
//   - An object alarm's delivery is claimed by AttemptObjectAlarm, which
//     moves the alarm to its retry time only if it is still due by the
//     server's clock: of two processes that listed the same due alarm, the
//     second finds it moved and does not deliver it.
//   - The schema migrates on Open, one migration per transaction, under a
//     transaction-scoped advisory lock, so processes starting together
//     against an empty database do not race.
//
// Errors carry errdefs kinds with the pgx error kept as the cause: a
// unique violation is already-exists, a full disk (SQLSTATE 53100) no
// space, and a server that is down, restarting or unreachable is
// unavailable (the API answers 503; nothing was recorded unless the failure
// hit a COMMIT in flight, which no database client can tell). Serialization
// failures and deadlocks are retried a few times inside the store.
package postgres

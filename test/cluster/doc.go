// Package cluster holds the cluster-mode tests (issue 14): three real
// `berth serve` nodes on this one machine, each in its own network
// namespace with its own address on a hub bridge, so traffic between them
// crosses real interfaces, and each with its own data dir, bridge, subnet,
// run dir and user-namespace base. They share one PostgreSQL (the state
// store, internal/pgtest) and one versitygw (the S3 blob store), both on
// the hub's address in the root namespace. The tests drive the nodes
// through the Go SDK and kill, stop and cut them off as a real cluster
// would see. They need root and are built only with -tags cluster;
// scripts/test.sh runs them after the integration suite.
//
// BERTH_IT_ID (one digit, default 0) names every resource, so the suite
// runs beside the other suites and other checkouts' copies of itself:
// hub bridge berthch<ID> with 10.24<ID>.0.254/24, namespaces
// berthc<ID>1..3 with 10.24<ID>.0.1..3, data dirs /var/tmp/berth-cl<ID>-n1..3.
package cluster

// Package store defines the controller's durable state: one record per
// sandbox name (config, state, alarm) and an append-only journal of
// lifecycle operations with idempotency keys.
//
// Implementations live in subpackages (sqlite today, postgres for cluster
// mode) and must all pass storetest.Run, the conformance suite.
package store

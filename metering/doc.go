// Package metering samples every running sandbox's resource use on the
// host and keeps it: a short per-sandbox history for the API (GET
// /v1/sandboxes/{name}/metrics, berth top, the E2B face's getMetrics) and
// per-tenant hourly usage records for billing (GET /v1/usage).
//
// Every Interval (5 s) the Sampler asks its Source for the running
// sandboxes and reads each one's counters through a Reader: CPU time and
// memory from the sandbox's cgroup (v2, or v1's cpuacct and memory
// controllers on a hybrid host), disk from its writable layer's btrfs
// quota group, network from the host side of its veth. Nothing is read
// from inside the sandbox, so a sandbox cannot lie about its use.
//
// History is a ring per sandbox of Window/Interval samples, allocated
// once (a sample is about 100 bytes: 180 samples, 18 KiB, for 15 min), so
// memory is bounded by the number of running sandboxes. A sandbox's ring
// is dropped when it stops running.
//
// Usage records: each sample's deltas (CPU seconds, busy seconds, bytes
// sent and received) and levels × interval (memory and disk GiB-seconds)
// are added to the record of the sandbox's tenant for the current UTC
// hour, and the records that changed are written to the state store
// after every round (store.Objects, object "berth.usage/<tenant>", key
// "<hour>/<node>": each node writes only its own keys, so cluster members
// sharing a store never overwrite each other). A restart reloads the
// current hour's records before adding to them, so it loses at most the
// one round in flight. Counters that went backwards (a restart of the
// sandbox's compute) count from zero again.
package metering

package api

import "time"

// Pool is one warm pool of a node (GET /v1/pools): fully started,
// anonymous, frozen sandboxes of one image, isolation and (optionally)
// instance type that a matching create claims instead of starting one.
type Pool struct {
	// Node is the node that keeps the pool ("local" on a single host).
	Node string `json:"node,omitempty"`
	// Image is the pool's image as configured; Digest what it resolved to
	// at the last refill.
	Image  string `json:"image"`
	Digest string `json:"digest,omitempty"`
	// Instance is the instance type a claim must name; "" takes any
	// (the member's limits are set at claim).
	Instance  string `json:"instance,omitempty"`
	Isolation string `json:"isolation"`
	// Snapshot is the snapshot a snapshot pool's members start from (a
	// create that restores it claims one); "" for an image pool.
	Snapshot string `json:"snapshot,omitempty"`
	// Size is the number of members the pool aims for now: a fixed
	// pool's configured size, an adaptive pool's current target (from
	// its recent create rate, within its range), either capped by the
	// node's pool memory budget. Ready how many are up and frozen now;
	// Starting how many are being started.
	Size     int `json:"size"`
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
	// Claims counts creates served from the pool; Misses creates that
	// matched but found it empty (they started cold); Refills members
	// started; Failures refills that failed.
	Claims   int64 `json:"claims"`
	Misses   int64 `json:"misses"`
	Refills  int64 `json:"refills"`
	Failures int64 `json:"failures"`
	// Shrinks counts idle members an adaptive pool (or a full memory
	// budget) let go.
	Shrinks int64 `json:"shrinks,omitempty"`
	// RatePerMin is the pool's recent demand (claims and misses per
	// minute, decaying with a one-minute time constant).
	RatePerMin float64 `json:"ratePerMin"`
	// Adaptive is an adaptive pool's range; nil for a fixed pool.
	Adaptive *PoolRange `json:"adaptive,omitempty"`
	// LastError is the last refill failure, kept until a refill succeeds;
	// RetryAt when the next refill is due after it (backing off).
	LastError string     `json:"lastError,omitempty"`
	RetryAt   *time.Time `json:"retryAt,omitempty"`
}

// PoolList is the answer of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// PoolRange is an adaptive pool's bounds.
type PoolRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

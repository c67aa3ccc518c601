// Package placement decides which node of a cluster takes a sandbox that
// is created or woken. The decision is one pure function, Place, over the
// node entries the store holds (store.Node), the store's clock and a
// Request; it does no I/O, so a test, a simulation and `berth` explaining
// a placement all see the same arithmetic.
//
// # Hard constraints
//
// Every node entry is checked against all of them; a node that fails any
// is excluded (Decision.Excluded names each node's reasons):
//
//   - role: the node's Roles include "node" (a control-only process runs
//     no sandboxes);
//   - stale: its Heartbeat is at most Options.Staleness (default 10 s)
//     before the store's now; an older one is dead for placement;
//   - draining: Draining is false (berth node drain);
//   - isolation: its Isolation lists the requested backend ("" is runc);
//   - labels: every label of Request.Selector is on the node, same value;
//   - tenant: for every key of Request.TenantNodes (the operator policy's
//     nodeLabels for the tenant) the node's label is one of the allowed
//     values;
//   - too-small: its Capacity holds the request at all;
//   - full: Capacity minus Committed holds the request now.
//
// When no node is left, Place returns an errdefs error whose message
// counts, per constraint, the nodes it excluded (a node may fail several),
// and whose kind says what the caller can do: unavailable when no
// sandbox node is alive and undrained among those that could ever take the
// request (retry later), invalid argument when no node could ever take it
// (isolation, labels, tenant policy or size: change the request or the
// cluster), resource exhausted when nodes could take it but are full.
//
// # Soft score
//
// Each remaining node gets terms in [0, 1] and a score that is their
// weighted sum (the weights are the Weight* constants; Options.Weights
// replaces them, which is how the tests switch locality off):
//
//	score = WeightImage        * image      (1 if the node holds the image digest)
//	      + WeightChain        * chain      (share of the snapshot chain's bytes it caches)
//	      + WeightFree         * free       (smallest free share of CPU, memory, disk after placing)
//	      - WeightInFlight     * inflight   (InFlight / (InFlight + InFlightHalf))
//	      + WeightPreferred    * preferred  (1 on the sandbox's previous owner)
//	      + WeightAffinity     * affinity   (share of Request.Affinity labels it has)
//	      - WeightAntiAffinity * anti       (share of Request.AntiAffinity labels it has)
//
// The pick is uniform among the candidates whose score is within
// Options.Margin (DefaultMargin) of the best. The spread is there for
// control-plane processes that decide at the same moment from the same
// node list: without it they would all pick the same top node. The margin
// is small so that the spread never overrules a real difference (a
// cached chain, a held image, one create in flight on a quiet node).
//
// # Reading the nodes
//
// Nodes rewrite their entries on every heartbeat, so InFlight and
// Committed in the store lag the placements made since. NodeCache keeps
// the node list for a bounded time (NodeCacheMaxAge, 1 s; up to three
// times that while one refresh reads behind the callers) and applies this
// process's own placements to its copy (Placed) until the nodes report
// them, so a burst from one process spreads before the nodes catch up, and
// 1,000 entries (hundreds of milliseconds to read and decode) are not read
// for every decision.
// The Placer confirms each pick against that node's own entry, read fresh
// (NodeCache.Fresh: one row), so a drain holds from the moment it is
// stored, not from the next refresh.
package placement

// Package forward lets any node of a cluster answer any request: a request
// for a sandbox that another node owns is proxied to that node, and a
// create is proxied to the node placement chose.
//
// It has two halves.
//
// Forwarder is the entry side. The API faces (server, e2b, preview) call it
// after they authenticated the caller and before they act:
//
//   - Sandbox reads the sandbox's record from the state store and, when
//     store.Sandbox.Owner names another node, proxies the request to that
//     node's node API under Prefix, answering Proxied; otherwise it
//     answers Local and the face serves the request itself. A record
//     without an owner (a single host, a sandbox that never ran) is local.
//   - Create asks a Placer for the node of a new sandbox and proxies the
//     create there when it is another node.
//
// The proxy streams both ways without buffering (httputil.ReverseProxy with
// FlushInterval -1: exec output, SSE, uploads and downloads of any size),
// passes WebSocket and other Upgrade requests through (PTY, watch), and
// ends the forwarded request when the client goes away, so the owner sees
// the cancel. The forwarded request carries the cluster credential, never
// the caller's API key (Authorization and X-API-Key are dropped), and the
// identity the entry node verified in headers (HeaderTenant, HeaderHost,
// HeaderKey, HeaderClient, and HeaderCaller, the Fingerprint of the
// caller's credential that idempotency keys are scoped by; see Identity).
//
// Receiver is the owner side, mounted on the node listener beside the node
// API (node/remote). It checks the cluster credential in constant time,
// turns the identity headers into a context value (the only place they are
// ever read), restores the original Host, and hands the request to the
// node's own API or preview handler, which serve it as if it had arrived
// there. A face trusts the identity only from that context value, which no
// HTTP client can set; the faces' own listeners strip the headers
// (StripHeaders) so a user who sends them gains nothing.
//
// What the entry caches, and why that is safe. The owner is the one that
// decides: a node reads the record of every forwarded request it is sent
// and serves it only while the record names it (the fencing point; a node
// that was paused past its lease finds the record moved). So the entry
// may route by what it read a moment ago:
//
//   - the owner cache: a request made here for a sandbox that was running
//     on another node when its record was last read (at most
//     Config.OwnerCacheAge ago, default 2 s) goes to that node without
//     reading the record, when the entry holds its whole body (none, or
//     at most 1 MiB of known length; otherwise the record is read). It is
//     marked (headerCached); an owner that finds the record names another
//     node, or no record, refuses it marked (headerRerouted), and the
//     entry reads the record and routes the request again, body and all:
//     a sandbox that moved is served by its new owner on the very request
//     that found the old one, and the client sees nothing of it. Any
//     failure to reach the cached owner does the same. Records read here
//     that name this node, no owner or no sandbox drop the entry.
//   - the node cache: the owner's entry (address, heartbeat, draining) and
//     the store's clock are read at most once per Config.NodeCacheAge
//     (default 1 s). Its heartbeat's age is the cached store clock plus
//     the time since on this process's clock; an owner that looks stale
//     by the cache is read again before it is called down, so only a
//     fresh read answers "down". A failed forward drops the entry. A
//     sleeping sandbox's route, which depends on whether its owner
//     drains (Mover), always reads the entry; a running sandbox's request
//     may be proxied to an owner that began draining up to NodeCacheAge
//     ago without the resend mark (the owner then serves it; its drain
//     loop sleeps the sandbox again on its next turn).
//
// Loops are refused: a forwarded request is never forwarded again. When it
// reaches a node that is not the owner either (the sandbox moved while the
// request was in flight), that node answers 503 unavailable "sandbox moved,
// retry".
//
// When the owner cannot be reached (no node entry, a stale heartbeat, a
// refused or timed-out connection) the decision is OwnerDown's; the default
// answers 503 unavailable naming the node. Takeover plugs in there.
//
// A node that is draining (berth node drain) empties lazily through
// Mover: a request made at any node for a sleeping sandbox of a draining
// owner moves the sandbox first (to this node or placement's choice) and
// is served there. A request for a sandbox the entry read running is
// proxied to the draining owner as usual, but marked resendable when the
// entry holds its whole body (none, or at most 1 MiB of known length):
// if the owner's drain put the sandbox to sleep meanwhile, the owner
// refuses it as moving instead of waking it there (RefuseMoving, from the
// owner's wake), and the entry reads the record again and moves it. A
// request that is not resendable is served by the owner.
//
// A single host configures no Forwarder: the faces then skip all of this
// with one nil check.
package forward

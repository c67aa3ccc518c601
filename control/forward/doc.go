// Package forward lets any node of a cluster answer any request: a request
// for a sandbox that another node owns is proxied to that node, and a
// create is proxied to the node placement chose.
//
// It has two halves.
//
// Forwarder is the entry side. The API faces (server, e2b, preview) call it
// after they authenticated the caller and before they act:
//
//   - Sandbox reads the sandbox's record from the state store on every call
//     (ownership is never cached: a sandbox that moved is routed to its new
//     owner at once) and, when store.Sandbox.Owner names another node,
//     proxies the request to that node's node API under Prefix, answering
//     Proxied; otherwise it answers Local and the face serves the request
//     itself. A record without an owner (a single host, a sandbox that
//     never ran) is local.
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
// Loops are refused: a forwarded request is never forwarded again. When it
// reaches a node that is not the owner either (the sandbox moved while the
// request was in flight), that node answers 503 unavailable "sandbox moved,
// retry".
//
// When the owner cannot be reached (no node entry, a stale heartbeat, a
// refused or timed-out connection) the decision is OwnerDown's; the default
// answers 503 unavailable naming the node. Takeover plugs in there: it
// serves the request here (this node took the sandbox over) or, with
// ErrRerouted, has it sent to the node it was taken over onto.
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

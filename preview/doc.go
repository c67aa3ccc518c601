// Package preview serves preview URLs: it proxies HTTP and WebSocket
// traffic from a public URL to a TCP port inside a sandbox.
//
// A URL names the port, the sandbox and a secret token:
// http://{port}-{sandbox}-{token}.{public host}/ routes by host name, which
// gives every exposure its own browser origin; /preview/{port}-{sandbox}-{token}/
// is the path form for clients that cannot use wildcard names (all path-form
// previews share one origin, so prefer host names in browsers).
//
// The package knows nothing about sandboxes: a Resolver (the node,
// node/local's Manager.Lookup) says whether an exposure exists and hands
// out a dialer to the port. The records and the token's shape are plain
// data in package internal/exposure (Exposure, ErrStale, NewToken and
// CheckToken here are its), so the node does not import this face. The
// Resolver must never wake a sleeping sandbox: a browser tab left open on
// a preview URL must not keep a destroyed or sleeping sandbox alive
// (cloudflare/sandbox-sdk #415). A URL made in an earlier run of the
// sandbox answers 410; an unknown, revoked or rotated one answers 404.
//
// Proxying streams both ways without buffering (server-sent events and
// long polls work) and every upstream connection is a new tunnel through
// the sandbox's agent, so services bound to 127.0.0.1 work and networking
// can be off. The upstream is sandbox code and therefore untrusted: its
// response headers are bounded, and berth's API key is never forwarded to it.
package preview

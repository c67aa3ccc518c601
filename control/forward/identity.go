package forward

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// Prefix is where forwarded requests arrive on the node listener:
// Prefix+"/api/…" for the API listener's handlers (native and E2B),
// Prefix+"/preview/…" for the preview listener's.
const Prefix = "/node/v1/forward"

// The headers a forwarded request carries. They mean something only on the
// node listener, after Receiver checked the cluster credential; everywhere
// else they are stripped (StripHeaders).
const (
	// HeaderTenant is the caller's tenant as the entry node authenticated
	// it; absent for the daemon's own API key.
	HeaderTenant = "X-Berth-Forward-Tenant"
	// HeaderHost is the Host the client asked for (E2B data-plane and
	// preview host routing need it).
	HeaderHost = "X-Berth-Forward-Host"
	// HeaderKey is "1" when the caller presented berth's API key to a
	// preview (a private preview admits it); the key itself stays behind.
	HeaderKey = "X-Berth-Forward-Key"
	// HeaderClient is the client's address, for the owner's log line.
	HeaderClient = "X-Berth-Forward-Client"
	// HeaderHop marks a request as forwarded; a receiver never forwards it
	// again.
	HeaderHop = "X-Berth-Forward-Hop"
	// HeaderOwner names the node the entry believed to be the owner, so
	// a node that is not answers "moved" with both names.
	HeaderOwner = "X-Berth-Forward-Owner"
	// HeaderCaller is Fingerprint of the credential the caller presented
	// (its key stays at the entry): the idempotency journal scopes keys
	// by it, so one caller's retry replays through any node and another
	// caller's same key never does.
	HeaderCaller = "X-Berth-Forward-Caller"

	// headerEntry names the node the request entered at.
	headerEntry = "X-Berth-Forward-Entry"
	// headerAuthorization carries a request's own Authorization (an app's,
	// Route.KeepAuthorization) while Authorization holds the credential.
	headerAuthorization = "X-Berth-Forward-Authorization"
	// headerRefused marks Receiver's own refusals (response header).
	headerRefused = "X-Berth-Forward-Refused"
	// headerReplay says the entry node can send the request again to
	// another node (it has no body, or the entry holds all of it): a
	// draining owner may then refuse it with headerMoving. Its value is
	// a nonce of the request, which a refusal (headerMoving,
	// headerRerouted) must echo to count.
	headerReplay = "X-Berth-Forward-Replay"
	// headerMoving marks an owner's refusal of a request for its own
	// sleeping sandbox while it drains (response header, the request's
	// nonce): the entry moves the sandbox and sends the request there
	// instead.
	headerMoving = "X-Berth-Forward-Moving"
	// headerCached says the entry routed the request by its owner cache,
	// without reading the record (it also sends headerReplay: it holds
	// the body); its value is the request's nonce, as headerReplay's.
	headerCached = "X-Berth-Forward-Cached"
	// headerRerouted marks an owner's refusal of such a request for a
	// sandbox it does not own (response header, the request's nonce):
	// the entry reads the record and routes the request again.
	headerRerouted = "X-Berth-Forward-Rerouted"
)

// headerPrefix covers every header above, including any a later version
// adds: all of them are stripped from user requests.
const headerPrefix = "X-Berth-Forward-"

// StripHeaders removes every forwarding header from h. The user-facing
// listeners call it on every request: the headers are trusted only from
// Receiver's context value anyway, but a header that never passes the edge
// can never reach a handler, a log or a sandbox's own server.
func StripHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len(headerPrefix) && strings.EqualFold(k[:len(headerPrefix)], headerPrefix) {
			delete(h, k)
		}
	}
}

// Identity is what the entry node verified about a forwarded request's
// caller. Receiver puts it in the request's context; the faces read it
// with From instead of authenticating (the caller's key did not travel).
type Identity struct {
	// Tenant is the caller's tenant ("" for the daemon's own API key).
	Tenant string
	// KeyVerified: the caller presented berth's API key (a preview's
	// private mode admits it).
	KeyVerified bool
	// Entry is the node the request entered the cluster at, as the
	// request said (for messages and logs).
	Entry string
	// Caller is Fingerprint of the caller's Authorization header at the
	// entry node.
	Caller string
	// Replayable: the entry node can send the request elsewhere if this
	// node refuses it as moving (see Mover).
	Replayable bool
	// Cached: the entry routed the request by its owner cache, without
	// reading the record; a node that does not own the sandbox refuses
	// it marked (headerRerouted) and the entry routes it again.
	Cached bool
	// nonce is a resendable request's (headerReplay's value), which a
	// refusal echoes.
	nonce string
}

// Fingerprint names a caller's credential without revealing it: 16 hex
// digits of the SHA-256 of its Authorization header. The native API's
// idempotency journal scopes keys by it, on the entry node and (through
// HeaderCaller) on the owner alike.
func Fingerprint(authorization string) string {
	sum := sha256.Sum256([]byte(authorization))
	return hex.EncodeToString(sum[:8])
}

type identityKey struct{}

// movingKey holds, for a replayable forwarded request, the answer's
// header map, where RefuseMoving (and reroute) mark a refusal.
type movingKey struct{}

// RefuseMoving is for a draining owner about to wake one of its sleeping
// sandboxes for the request in ctx (node/local's MayWake hook, through the
// daemon). When the request was forwarded by an entry node that can send
// it again (Identity.Replayable), it marks the answer (headerMoving) and
// returns true: the caller then refuses the wake with an error, writes
// nothing else, and the entry moves the sandbox off this node and sends
// the request to its new owner. Otherwise it returns false and the wake
// goes ahead here. Call it before anything of the answer is written.
func RefuseMoving(ctx context.Context) bool {
	h, ok := ctx.Value(movingKey{}).(http.Header)
	id, _ := From(ctx)
	if !ok || !id.Replayable {
		return false
	}
	h.Set(headerMoving, id.nonce)
	return true
}

// withIdentity is unexported: only Receiver, after the cluster credential
// checked out, may vouch for a caller.
func withIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// From returns the verified identity of a forwarded request; ok is false
// for every request that did not come through Receiver.
func From(ctx context.Context) (id Identity, ok bool) {
	id, ok = ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Forwarded reports whether the request in ctx was forwarded to this node
// (it must then be served here or refused, never forwarded again).
func Forwarded(ctx context.Context) bool {
	_, ok := From(ctx)
	return ok
}

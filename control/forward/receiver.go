package forward

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ReceiverConfig configures NewReceiver.
type ReceiverConfig struct {
	// Token is the cluster credential; empty refuses everything.
	Token string
	// API serves forwarded requests of the API listener (the node's whole
	// API stack: Guard, the E2B face, the console, the native API).
	API http.Handler
	// Preview serves forwarded preview requests; nil: 404.
	Preview http.Handler
}

type receiver struct {
	c        ReceiverConfig
	keyHash  [sha256.Size]byte
	hasToken bool
}

// NewReceiver returns the owner side: mount it on the node listener at
// Prefix+"/" (Mount does), beside the node API.
func NewReceiver(c ReceiverConfig) http.Handler {
	rv := &receiver{c: c}
	if c.Token != "" {
		rv.keyHash = sha256.Sum256([]byte(c.Token))
		rv.hasToken = true
	}
	return rv
}

// Mount returns the node listener's handler: forwarded requests (under
// Prefix) go to recv, everything else to nodeAPI (node/remote's handler).
func Mount(nodeAPI, recv http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/") {
			recv.ServeHTTP(w, r)
			return
		}
		nodeAPI.ServeHTTP(w, r)
	})
}

func (rv *receiver) authorized(r *http.Request) bool {
	if !rv.hasToken {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	// Fixed-size hashes keep the comparison constant-time in the length.
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], rv.keyHash[:]) == 1
}

func (rv *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !rv.authorized(r) {
		refuse(w, errdefs.Unauthenticated("forward: missing or wrong cluster credential"))
		return
	}
	if r.Header.Get(HeaderHop) != "1" {
		refuse(w, errdefs.InvalidArgument("forward: not a forwarded request (no %s)", HeaderHop))
		return
	}
	face, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, Prefix+"/"), "/")
	var next http.Handler
	switch Face(face) {
	case API:
		next = rv.c.API
	case Preview:
		next = rv.c.Preview
	}
	if !ok || next == nil {
		refuse(w, errdefs.NotFound("forward: no face at %q", r.URL.Path))
		return
	}
	id := Identity{
		Tenant:      r.Header.Get(HeaderTenant),
		KeyVerified: r.Header.Get(HeaderKey) == "1",
		Entry:       r.Header.Get(headerEntry),
		Caller:      r.Header.Get(HeaderCaller),
		Replayable:  r.Header.Get(headerReplay) != "",
		Cached:      r.Header.Get(headerCached) != "",
		nonce:       r.Header.Get(headerReplay),
	}
	ctx := withIdentity(r.Context(), id)
	if id.Replayable || id.Cached {
		ctx = context.WithValue(ctx, movingKey{}, w.Header())
	}
	out := r.Clone(ctx)
	out.Body = r.Body // Clone shares it anyway; said for the reader
	out.URL.Path = "/" + rest
	if raw := r.URL.RawPath; raw != "" {
		out.URL.RawPath = strings.TrimPrefix(raw, Prefix+"/"+face)
	}
	if host := r.Header.Get(HeaderHost); host != "" {
		out.Host = host
	}
	if c := r.Header.Get(HeaderClient); c != "" {
		out.RemoteAddr = c
	}
	out.Header.Del("Authorization") // the cluster credential goes no further
	if a := r.Header.Get(headerAuthorization); a != "" {
		out.Header.Set("Authorization", a)
	}
	StripHeaders(out.Header)
	out.RequestURI = out.URL.RequestURI()
	next.ServeHTTP(w, out)
}

// refuse answers a request the receiver itself refuses, marked so that the
// entry node reports it as the node's refusal rather than passing it on.
func refuse(w http.ResponseWriter, err error) {
	h := w.Header()
	h.Set(headerRefused, "1")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(api.HTTPStatus(err))
	_ = json.NewEncoder(w).Encode(api.ErrorBody(err))
}

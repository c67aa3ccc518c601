package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
)

// Routes a browser cannot send an Authorization header to: a WebSocket
// (the browser API takes no headers) and an EventSource (neither). Only
// these accept the key as ?access_token=.
const (
	terminalWSPattern = "GET /v1/sandboxes/{name}/terminals/{id}/ws"
	watchPattern      = "GET /v1/sandboxes/{name}/watch"
)

const accessTokenParam = "access_token"

// tokenAuthorized reports whether r carries the API key as ?access_token=
// on a route that may take it that way: the terminal WebSocket (on an
// actual upgrade request) and the watch event stream. Everywhere else a
// key in the URL is refused, because URLs end up in logs, browser history
// and Referer headers; a route that can take a header must get a header.
//
// Whatever the outcome, the parameter is removed from r.URL so that no
// handler, log line or upstream request can ever see it.
func (s *server) tokenAuthorized(r *http.Request, pattern string) bool {
	q := r.URL.Query()
	if !q.Has(accessTokenParam) {
		return false
	}
	tok := q.Get(accessTokenParam)
	q.Del(accessTokenParam)
	r.URL.RawQuery = q.Encode()
	r.RequestURI = r.URL.RequestURI()
	if !s.hasKey {
		return false
	}
	switch {
	case pattern == terminalWSPattern && isWebSocketUpgrade(r):
	case pattern == watchPattern:
	default:
		return false
	}
	// As in authorized: compare fixed-size hashes in constant time.
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.keyHash[:]) == 1
}

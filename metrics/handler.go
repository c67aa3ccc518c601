package metrics

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the exposition is served.
const Path = "/metrics"

// Handler serves the exposition. With a token, a request must send it as
// "Authorization: Bearer <token>" (compared in constant time); an empty
// token refuses every request with 401, so that /metrics on a listener
// the operator did not protect fails closed. A separate, private listener
// (serve --metrics-listen) uses Open instead.
func (r *Registry) Handler(token string) http.Handler {
	h := r.Open()
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if token == "" || !bearerIs(req, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth-metrics"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			msg := `{"code":"unauthenticated","message":"/metrics needs the metrics token (serve --metrics-token-file) as \"Authorization: Bearer <token>\", or is served on --metrics-listen"}` + "\n"
			if token == "" {
				msg = `{"code":"unauthenticated","message":"/metrics is not served on this listener without a metrics token: start serve with --metrics-token-file or --metrics-listen"}` + "\n"
			}
			_, _ = w.Write([]byte(msg))
			return
		}
		h.ServeHTTP(w, req)
	})
}

// Open serves the exposition without authentication, for a listener of
// its own.
func (r *Registry) Open() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
}

func bearerIs(r *http.Request, want [sha256.Size]byte) bool {
	a := r.Header.Get("Authorization")
	const p = "bearer "
	if len(a) < len(p) || !strings.EqualFold(a[:len(p)], p) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(a[len(p):])))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// Mount serves h at Path (GET) in front of next; every other request
// goes to next.
func Mount(next, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Path {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				http.Error(w, `{"code":"invalid_argument","message":"/metrics answers GET"}`, http.StatusMethodNotAllowed)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

package reqinfo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// Header is the request and response header of the request id.
const Header = "X-Request-Id"

// maxIDLen bounds an incoming id; longer ones are replaced.
const maxIDLen = 128

// Info is one request's log fields. Handlers fill in what they learn;
// methods are safe for concurrent use (a handler may hand its request to
// goroutines) and do nothing on a nil Info.
type Info struct {
	ID string

	mu                     sync.Mutex
	route, sandbox, tenant string
}

type key struct{}

// With returns ctx carrying in.
func With(ctx context.Context, in *Info) context.Context {
	return context.WithValue(ctx, key{}, in)
}

// From returns the request's Info, or nil outside the middleware.
func From(ctx context.Context) *Info {
	in, _ := ctx.Value(key{}).(*Info)
	return in
}

// ID returns the request id in ctx, or "".
func ID(ctx context.Context) string {
	if in := From(ctx); in != nil {
		return in.ID
	}
	return ""
}

// SetRoute records the route pattern that served the request, and the
// sandbox it names ("" for none).
func (in *Info) SetRoute(route, sandbox string) {
	if in == nil {
		return
	}
	in.mu.Lock()
	in.route, in.sandbox = route, sandbox
	in.mu.Unlock()
}

// SetTenant records the authenticated tenant.
func (in *Info) SetTenant(t string) {
	if in == nil {
		return
	}
	in.mu.Lock()
	in.tenant = t
	in.mu.Unlock()
}

// Fields returns route, sandbox and tenant.
func (in *Info) Fields() (route, sandbox, tenant string) {
	if in == nil {
		return "", "", ""
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.route, in.sandbox, in.tenant
}

// ValidID reports whether an incoming X-Request-Id is safe to adopt: 1-128
// characters of A-Z a-z 0-9 and . _ : -, so that it can never break a log
// line or a header.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// NewID returns a fresh request id: "req_" and 16 hex digits.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

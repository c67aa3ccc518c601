package tenant

import "context"

type key struct{}

// With records the calling tenant in ctx (the API server does this after
// authenticating a key; a forwarded request carries the tenant its entry
// node verified).
func With(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, name)
}

// From returns the calling tenant, or "" for the operator's own key.
func From(ctx context.Context) string {
	s, _ := ctx.Value(key{}).(string)
	return s
}

// Usage is what a tenant runs now, beside the start being judged.
type Usage struct {
	Sandboxes int
	VCPU      float64
	MemoryMiB int64
}

// Request is one start of a sandbox, as the operator policy judges it.
type Request struct {
	Tenant      string
	Sandbox     string
	Image       string // what was asked for (name, ref or digest)
	Digest      string // what it resolves to
	Snapshot    string // set when starting from a snapshot
	Instance    string // a named type, or "custom"
	VCPU        float64
	MemoryMiB   int64
	DiskMB      int64
	Internet    bool
	EgressRules []string
	Usage       Usage
}

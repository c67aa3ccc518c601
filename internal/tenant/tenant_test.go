package tenant

import (
	"context"
	"testing"
)

func TestWithFrom(t *testing.T) {
	ctx := context.Background()
	if got := From(ctx); got != "" {
		t.Fatalf("From of a bare context = %q, want \"\" (the operator)", got)
	}
	if got := From(With(ctx, "t1")); got != "t1" {
		t.Fatalf("From(With(t1)) = %q", got)
	}
	// A string value under another key is not the tenant.
	type other struct{}
	if got := From(context.WithValue(ctx, other{}, "t2")); got != "" {
		t.Fatalf("From saw another key's value %q", got)
	}
}

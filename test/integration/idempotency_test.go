//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestIdempotentFileRoutes against the real daemon: a keyed file delete
// retried after the file came back is replayed, not redone (the file
// stays); a keyed upload is refused with a 400 naming the route, and the
// file is left as it was.
func TestIdempotentFileRoutes(t *testing.T) {
	const name = "it-idemfiles"
	sandbox(t, api.CreateSandboxRequest{Name: name})
	bg := context.Background()
	keyed := client.WithIdempotencyKey(bg, fmt.Sprintf("it-idemrm-%d", time.Now().UnixNano()))
	const p = "/home/user/f"
	write := func(ctx context.Context, s string) error {
		return d.c.WriteFile(ctx, name, p, strings.NewReader(s), 0o644)
	}
	exists := func() bool {
		ok, err := d.c.Exists(bg, name, p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := write(bg, "one"); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Remove(keyed, name, p, false); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("the keyed delete left the file")
	}
	if err := write(bg, "two"); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Remove(keyed, name, p, false); err != nil {
		t.Fatalf("keyed retry: %v", err)
	}
	if !exists() {
		t.Fatal("the keyed retry deleted the file again; want the first answer replayed")
	}
	err := write(keyed, "three")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "Idempotency-Key is not supported on PUT /v1/sandboxes/{name}/files/content") {
		t.Fatalf("keyed upload: %v, want 400 naming the route", err)
	}
	if r := run(t, name, "cat "+p); r.Stdout != "two" {
		t.Fatalf("after the refused upload the file holds %q, want %q", r.Stdout, "two")
	}
}

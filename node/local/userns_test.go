package local

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestUserNSRanges: every sandbox gets its own host id range, the same one
// at every start (it is in the record), a destroyed sandbox's range is
// reused, and a full pool is a clear error.
func TestUserNSRanges(t *testing.T) {
	r := newRig(t)
	r.cfg.UserNS = UserNSConfig{Base: 1 << 20, Size: 1 << 16, Count: 2}
	r.m = newAttached(t, r.cfg)
	ctx := context.Background()
	a, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "b"}, false)
	if err != nil {
		t.Fatal(err)
	}
	ma, mb := r.rfs.idmaps[a.ID], r.rfs.idmaps[b.ID]
	if ma.Size != 1<<16 || mb.Size != 1<<16 || ma.HostID == mb.HostID || ma.HostID < 1<<20 || mb.HostID < 1<<20 {
		t.Fatalf("ranges a=%+v b=%+v, want two distinct 65536-id ranges from 2^20", ma, mb)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "c"}, false); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third sandbox with two slots: %v", err)
	}
	// Restart: a new manager on the same store keeps a's range.
	if err := plane(r.m).Sleep(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	r.m = newAttached(t, r.cfg)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a"}, false); err != nil {
		t.Fatal(err)
	}
	if got := r.rfs.idmaps[a.ID]; got != ma {
		t.Fatalf("a's range after a restart %+v, want %+v", got, ma)
	}
	if err := plane(r.m).Destroy(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := plane(r.m).Destroy(ctx, "c"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatal(err)
	}
	c, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "c"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.rfs.idmaps[c.ID]; got != mb {
		t.Fatalf("c got %+v, want b's freed range %+v", got, mb)
	}
}

func TestIsolationChoice(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "g", Isolation: "gvisor"}, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("gvisor on a host without runsc: %v", err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "x", Isolation: "kata"}, false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unknown isolation: %v", err)
	}
	s, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "r"}, false)
	if err != nil || s.Isolation != api.IsolationRunc {
		t.Fatalf("default isolation %q, %v", s.Isolation, err)
	}
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "r", Isolation: "gvisor"}, false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("changing isolation of an existing sandbox: %v", err)
	}
}

// TestUserNSCountAboveTheBound: a base at or above 2^31 has no ranges
// (the count used to wrap around to a huge number above it).
func TestUserNSCountAboveTheBound(t *testing.T) {
	for _, base := range []uint32{1 << 31, 1<<31 + 5<<24} {
		c := UserNSConfig{Base: base}
		c.defaults()
		if c.Count != 0 {
			t.Errorf("base %d: %d ranges, want 0", base, c.Count)
		}
	}
	c := UserNSConfig{Base: 7 << 28}
	c.defaults()
	if c.Count != (1<<31-7<<28)/(1<<16) {
		t.Errorf("base 7<<28: %d ranges", c.Count)
	}
}

package daemon

import (
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// TestPoolSpecs: the policy's pools, then --pool's; a flag for the same
// image, instance and isolation replaces the policy's size; a bad spec
// fails the start.
func TestPoolSpecs(t *testing.T) {
	pol := &policy.Policy{Pools: []string{"debian-trixie=4", "python=2,instance=basic"}}
	got, err := poolSpecs(Config{Pools: []string{"debian-trixie=8", "node=1"}}, pol)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Image != "debian-trixie" || got[0].Size != 8 || got[1].Instance != "basic" || got[2].Image != "node" {
		t.Fatalf("pool specs: %+v", got)
	}
	if _, err := poolSpecs(Config{Pools: []string{"debian-trixie"}}, nil); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad --pool: %v", err)
	}
}

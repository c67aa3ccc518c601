package daemon

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// TestNodeConfigDefaults: the name defaults to the host's, the timing to
// 2s/10s, and a bad role, label or timing stops berth serve.
func TestNodeConfigDefaults(t *testing.T) {
	var c NodeConfig
	if err := c.defaults(); err != nil || c.Name == "" || c.Beat != 2*time.Second || c.Stale != 10*time.Second {
		t.Fatalf("defaults %+v %v", c, err)
	}
	for _, bad := range []NodeConfig{
		{Role: "worker"},
		{Labels: []string{"no-value"}},
		{Labels: []string{"bad key=1"}},
		{Beat: 5 * time.Second, Stale: 10 * time.Second},
		{Name: "Not_A_Host"},
	} {
		if err := bad.defaults(); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want invalid argument", bad, err)
		}
	}
}

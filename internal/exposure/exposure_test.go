package exposure

import (
	"errors"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestTokens(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tk := NewToken()
		if len(tk) != TokenLen || CheckToken(tk) != nil {
			t.Fatalf("NewToken %q: length %d, check %v", tk, len(tk), CheckToken(tk))
		}
		if seen[tk] {
			t.Fatalf("NewToken repeated %q", tk)
		}
		seen[tk] = true
	}
	for _, bad := range []string{"short7x", "UPPERCASE0token", "has-dash-token", "0123456789abcdef0123456789abcdef0"} {
		if err := CheckToken(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckToken(%q) = %v, want invalid argument", bad, err)
		}
	}
	if err := CheckToken("stable0preview"); err != nil { // the control: a good caller token
		t.Fatalf("CheckToken of a good token: %v", err)
	}
}

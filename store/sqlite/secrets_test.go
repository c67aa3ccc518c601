package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestSecrets(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetSecret(ctx, "gh"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("missing secret: %v", err)
	}
	for _, v := range []string{"one", "two"} {
		if err := s.PutSecret(ctx, "gh", v); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := s.GetSecret(ctx, "gh"); err != nil || v != "two" {
		t.Fatalf("get: %q %v", v, err)
	}
	list, err := s.ListSecrets(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "gh" || list[0].UpdatedAt.IsZero() {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.DeleteSecret(ctx, "gh"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSecret(ctx, "gh"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

package runtime

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestCapsHex(t *testing.T) {
	if got := capsHex(Capabilities); got != capMask {
		t.Fatalf("capsHex(Capabilities) = %s, want %s", got, capMask)
	}
}

// TestVerifyPosture: this test process has no seccomp filter and no
// no_new_privs, so a spec that asks for them must fail verification, and
// one that asks for nothing passes (the negative control).
func TestVerifyPosture(t *testing.T) {
	dir := t.TempDir()
	s, err := Spec(baseOpts())
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	err = VerifyPosture(os.Getpid(), dir)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "NoNewPrivs") || !strings.Contains(err.Error(), "Seccomp") {
		t.Fatalf("err = %v, want a posture mismatch naming NoNewPrivs and Seccomp", err)
	}
	s.Process.NoNewPrivileges, s.Linux.Seccomp, s.Process.Capabilities = false, nil, nil
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPosture(os.Getpid(), dir); err != nil {
		t.Fatalf("a spec asking for nothing: %v", err)
	}
}

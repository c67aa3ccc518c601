package runtime

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestRuncWeight: the cpu.weight a resize writes follows the conversion
// the container's runc used for its current quota, linear or quadratic;
// an unknown one is refused (the caller falls back to runc update).
func TestRuncWeight(t *testing.T) {
	if quadraticWeight(1024) != 100 && quadraticWeight(1024) != 101 {
		t.Fatalf("quadratic weight of the default shares: %d", quadraticWeight(1024))
	}
	if linearWeight(1024) != 39 {
		t.Fatalf("linear weight of 1024 shares: %d", linearWeight(1024))
	}
	for _, c := range []struct {
		name    string
		current uint64
		want    uint64
		ok      bool
	}{
		{"linear", linearWeight(512), linearWeight(256), true},
		{"quadratic", quadraticWeight(512), quadraticWeight(256), true},
		{"unknown", 7777, 0, false},
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("50000 100000\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.FormatUint(c.current, 10)+"\n"), 0o644)
		got, ok := runcWeight(dir, shares(250))
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %d %v, want %d %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

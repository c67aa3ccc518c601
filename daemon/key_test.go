package daemon

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// New keys have the form E2B's SDKs check, so one key serves both APIs;
// a key made earlier is kept as it is.
func TestAPIKeyForm(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "api-key")
	key, err := loadOrCreateKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("new key %q is not e2b_ + 40 hex", key)
	}
	again, err := loadOrCreateKey(p)
	if err != nil || again != key {
		t.Fatalf("reload: %q %v", again, err)
	}
	old := "bk_" + "0123456789abcdef0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(p, []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := loadOrCreateKey(p); err != nil || k != old {
		t.Fatalf("existing key replaced: %q %v", k, err)
	}
}

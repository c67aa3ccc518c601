package daemon

import (
	"strings"
	"testing"
)

// The full key is printed only to a terminal; to anything else (a log
// file) only its first characters.
func TestShownKey(t *testing.T) {
	key := "e2b_0123456789abcdef0123456789abcdef01234567"
	if got := shownKey(key, true); got != key {
		t.Fatalf("terminal: %q", got)
	}
	got := shownKey(key, false)
	if strings.Contains(got, key[8:16]) || !strings.HasPrefix(got, key[:8]) || !strings.Contains(got, "redacted") {
		t.Fatalf("not a terminal: %q shows the key", got)
	}
	if got := shownKey("short", false); strings.Contains(got, "short") {
		t.Fatalf("short key shown: %q", got)
	}
}

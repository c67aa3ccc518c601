package check

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func TestKey(t *testing.T) {
	good := []string{"a", "snapshots/3f2a.tar.zst", "A-Z_a.z/0-9", "...", "a..b", strings.Repeat("s", MaxSegmentLen)}
	bad := []string{"", "/a", "a/", "a//b", ".", "..", "a/../b", "a/./b", "a\x00", "a b", "a%2f..", "é",
		strings.Repeat("s", MaxSegmentLen+1), strings.Repeat("a/", MaxKeyLen/2+1)}
	for _, k := range good {
		if err := Key(k); err != nil {
			t.Errorf("Key(%q) = %v, want ok", k, err)
		}
	}
	for _, k := range bad {
		if err := Key(k); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Key(%q) = %v, want invalid argument", k, err)
		}
	}
	for _, p := range []string{"", "snap", "snap/", "a/b."} {
		if err := Prefix(p); err != nil {
			t.Errorf("Prefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"/", "../", "a/../", "a//", "~tmp/"} {
		if err := Prefix(p); err == nil {
			t.Errorf("Prefix(%q) accepted", p)
		}
	}
}

func hexSum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func TestReader(t *testing.T) {
	read := func(content string, size int64, sum string) error {
		_, err := io.ReadAll(NewReader(io.NopCloser(strings.NewReader(content)), "k", size, sum))
		return err
	}
	// Control: matching content reads clean.
	if err := read("hello", 5, hexSum("hello")); err != nil {
		t.Fatalf("clean read: %v", err)
	}
	for name, err := range map[string]error{
		"flipped":   read("hellp", 5, hexSum("hello")),
		"truncated": read("hell", 5, hexSum("hello")),
		"grown":     read("hello!", 5, hexSum("hello")),
	} {
		if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "blob k is corrupt") {
			t.Errorf("%s: %v, want corrupt", name, err)
		}
	}
	if err := Digest(strings.ToUpper(hexSum(""))); err == nil {
		t.Error("uppercase digest accepted")
	}
}

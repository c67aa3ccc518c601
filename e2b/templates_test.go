package e2b

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadTemplates(t *testing.T) {
	dir := t.TempDir()
	tp, err := LoadTemplates(filepath.Join(dir, "missing.json"))
	if err != nil || tp["base"] != "debian-trixie" || tp["code-interpreter-v1"] != "debian-trixie" {
		t.Fatalf("defaults: %v %v", tp, err)
	}
	p := filepath.Join(dir, "t.json")
	os.WriteFile(p, []byte(`{"my-tpl": "team", "base": "ubuntu"}`), 0o644)
	tp, err = LoadTemplates(p)
	if err != nil || tp["my-tpl"] != "team" || tp["base"] != "ubuntu" || tp["code-interpreter-v1"] != "debian-trixie" {
		t.Fatalf("merged: %v %v", tp, err)
	}
	os.WriteFile(p, []byte(`{"bad name": "x"}`), 0o644)
	if _, err := LoadTemplates(p); err == nil {
		t.Fatal("invalid template ID accepted")
	}
}

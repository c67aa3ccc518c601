package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWebhookConfigLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "secret")
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(good, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := (WebhookConfig{}).load(); err != nil || s != nil {
		t.Fatalf("none configured: %q %v", s, err)
	}
	s, err := WebhookConfig{URLs: []string{"https://hooks.example.com/berth"}, SecretFile: good}.load()
	if err != nil || string(s) != "0123456789abcdef" {
		t.Fatalf("valid: %q %v", s, err)
	}
	for name, c := range map[string]WebhookConfig{
		"no secret":         {URLs: []string{"https://h.example.com/"}},
		"short secret":      {URLs: []string{"https://h.example.com/"}, SecretFile: short},
		"missing secret":    {URLs: []string{"https://h.example.com/"}, SecretFile: filepath.Join(dir, "none")},
		"secret, no url":    {SecretFile: good},
		"not http":          {URLs: []string{"file:///etc/passwd"}, SecretFile: good},
		"credentials":       {URLs: []string{"https://u:p@h.example.com/"}, SecretFile: good},
		"same URL twice":    {URLs: []string{"https://h.example.com/", "https://h.example.com/"}, SecretFile: good},
		"relative, no host": {URLs: []string{"/hook"}, SecretFile: good},
	} {
		if _, err := c.load(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	a, b := webhookCursor(dir, "https://a.example.com/?token=x"), webhookCursor(dir, "https://b.example.com/")
	if a == b || strings.Contains(a, "token") || filepath.Dir(a) != filepath.Join(dir, "webhooks") {
		t.Fatalf("cursor files: %s %s", a, b)
	}
}

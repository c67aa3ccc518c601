package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("images:\n  debian-trixie: sha256:"+strings.Repeat("ab", 32)+"\ndefault:\n  internet: true\n"), 0o600)
	os.WriteFile(bad, []byte("images:\n  debian-trixie: latest\ndefault:\n  maxVCPU: lots\n"), 0o600)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"policy", "check", good}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok (1 allowed images") {
		t.Fatalf("good file: %d %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code := run(context.Background(), []string{"policy", "check", bad}, nil, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "bad.yaml:2: image \"debian-trixie\" must be pinned") || !strings.Contains(errb.String(), "bad.yaml:4: maxVCPU must be a number") {
		t.Fatalf("bad file: %d %q", code, errb.String())
	}
}

func TestIdempotencyKeyFlag(t *testing.T) {
	var got, path string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, path = r.Header.Get("Idempotency-Key"), r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}` + "\n"))
	}))
	defer ts.Close()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--url", ts.URL, "--api-key", "k", "--idempotency-key", "retry-1", "call", "AgentSandbox", "ws1", "SaveWorkspace"}, nil, &out, &errb)
	if code != 0 || got != "retry-1" || path != "/v1/objects/AgentSandbox/ws1/SaveWorkspace" || !strings.Contains(out.String(), `"ok": true`) {
		t.Fatalf("code %d, key %q, path %q, out %q, err %q", code, got, path, out.String(), errb.String())
	}
}

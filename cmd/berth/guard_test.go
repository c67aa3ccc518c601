package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/berth-sh/berth/node/local"
)

// `berth kill V ..` fails without sending anything, against a server that
// would redirect it (as a stock ServeMux did) to DELETE /v1/sandboxes/V.
func TestKillDotDotDoesNotDestroy(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/v1/sandboxes/v" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Redirect(w, r, "/v1/sandboxes/v", http.StatusTemporaryRedirect)
	}))
	defer ts.Close()
	c := &cli{t: t, url: ts.URL}
	for _, id := range []string{"..", "."} {
		code, _, errs := c.run("", "kill", "v", id)
		if code == 0 || !strings.Contains(errs, "invalid") {
			t.Fatalf("berth kill v %s: exit %d, stderr %q", id, code, errs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s == "DELETE /v1/sandboxes/v" {
			t.Fatalf("the sandbox was deleted: %v", seen)
		}
	}
}

// The default instance is the same in the code, the CLI's help and the
// OpenAPI file.
func TestDefaultInstanceAgrees(t *testing.T) {
	want := "default " + local.DefaultInstance
	cmd := (&app{}).sandboxCmd()
	create, _, err := cmd.Find([]string{"create"})
	if err != nil {
		t.Fatal(err)
	}
	if f := create.Flags().Lookup("instance"); f == nil || !strings.Contains(f.Usage, want) {
		t.Fatalf("--instance help does not say %q", want)
	}
	spec, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(spec), "\n") {
		found = found || strings.Contains(line, "instance: { type: string, description:")
		if strings.Contains(line, "instance: { type: string, description:") && !strings.Contains(line, want) {
			t.Fatalf("openapi.yaml: %s does not say %q", strings.TrimSpace(line), want)
		}
	}
	if !found {
		t.Fatal("openapi.yaml: no described instance field")
	}
}

package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FileOptions in the context become the files routes' query parameters.
func TestFileOptionsQuery(t *testing.T) {
	var got []url.Values
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Query())
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/files"):
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"files":[]}`))
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/stat"):
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"path":"/root/x","type":"file"}`))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer ts.Close()
	c := New(ts.URL, "k")
	ctx := WithFileOptions(context.Background(), FileOptions{User: "root", Session: "s1", HideDotFiles: true, FilesOnly: true})
	if _, err := c.ListFiles(ctx, "box", ".", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "box", "x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "box", "x", false); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "box", "x", strings.NewReader("y"), 0); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d requests", len(got))
	}
	for i, q := range got {
		if q.Get("user") != "root" || q.Get("session") != "s1" {
			t.Errorf("request %d: %v", i, q)
		}
	}
	if got[0].Get("hidden") != "false" || got[2].Get("type") != "file" || got[3].Has("mode") {
		t.Fatalf("list %v, remove %v, write %v", got[0], got[2], got[3])
	}
	// Without options: none of the parameters.
	got = nil
	c.Remove(context.Background(), "box", "x", false)
	if q := got[0]; q.Has("user") || q.Has("session") || q.Has("type") {
		t.Fatalf("plain remove: %v", q)
	}
}

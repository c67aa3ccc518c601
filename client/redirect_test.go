package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// recorder is a server that answers every request the way a stock ServeMux
// answers a non-canonical path: a 307 to /v1/sandboxes/v, and a 204 there,
// and records what reached it.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.seen = append(rc.seen, r.Method+" "+r.URL.Path)
	rc.mu.Unlock()
	if r.URL.Path == "/v1/sandboxes/v" {
		w.WriteHeader(http.StatusNoContent) // "destroyed"
		return
	}
	http.Redirect(w, r, "/v1/sandboxes/v", http.StatusTemporaryRedirect)
}

func (rc *recorder) reached(what string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, s := range rc.seen {
		if s == what {
			return true
		}
	}
	return false
}

// The client follows no redirect: a 307 is an error, and the DELETE is
// never re-sent to the Location. Negative control: a plain http.Client
// follows it and "destroys" the sandbox.
func TestClientFollowsNoRedirect(t *testing.T) {
	rc := &recorder{}
	ts := httptest.NewServer(rc)
	defer ts.Close()
	c := New(ts.URL, key)
	_, err := c.KillProcess(context.Background(), "v", "web", KillOptions{})
	if err == nil || !errors.Is(err, errdefs.ErrInternal) {
		t.Fatalf("kill through a redirect: %v, want an error", err)
	}
	if rc.reached("DELETE /v1/sandboxes/v") {
		t.Fatal("the client followed the redirect and deleted the sandbox")
	}
	// A caller's own http.Client gets the same policy (on a copy).
	own := &http.Client{}
	c = New(ts.URL, key, WithHTTPClient(own))
	if err := c.DeleteTerminal(context.Background(), "v", "t1"); err == nil || rc.reached("DELETE /v1/sandboxes/v") {
		t.Fatalf("own client: %v, seen %v", err, rc.seen)
	}
	if own.CheckRedirect != nil {
		t.Fatal("the caller's http.Client was modified")
	}

	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/sandboxes/v/processes/web", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if !rc.reached("DELETE /v1/sandboxes/v") {
		t.Fatalf("negative control: a plain client did not follow the 307 (%v)", rc.seen)
	}
}

// Ids "", "." and ".." are refused before any request is sent.
func TestClientRefusesDotIDs(t *testing.T) {
	rc := &recorder{}
	ts := httptest.NewServer(rc)
	defer ts.Close()
	c := New(ts.URL, key)
	ctx := context.Background()
	for _, id := range []string{"..", ".", ""} {
		calls := map[string]error{}
		_, calls["kill"] = c.KillProcess(ctx, "v", id, KillOptions{})
		_, calls["get process"] = c.GetProcess(ctx, "v", id)
		calls["delete session"] = c.DeleteSession(ctx, "v", id, 0)
		calls["delete terminal"] = c.DeleteTerminal(ctx, "v", id)
		calls["destroy"] = c.Destroy(ctx, id)
		calls["delete snapshot"] = c.DeleteSnapshot(ctx, id)
		calls["delete secret"] = c.DeleteSecret(ctx, id)
		_, _, calls["attach terminal"] = func() (any, any, error) { _, err := c.AttachTerminal(ctx, "v", id, 0, 0); return nil, nil, err }()
		for what, err := range calls {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s %q: %v, want invalid_argument", what, id, err)
			}
		}
	}
	if len(rc.seen) != 0 {
		t.Fatalf("requests were sent: %v", rc.seen)
	}
}

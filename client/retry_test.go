package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestRetryAfterKept: a 429 with Retry-After (a full start queue) is a
// resource-exhausted error that still says when to come back; without the
// header it says nothing (the negative control).
func TestRetryAfterKept(t *testing.T) {
	var withHeader atomic.Bool
	withHeader.Store(true)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if withHeader.Load() {
			w.Header().Set("Retry-After", "7")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"code":"resource_exhausted","message":"queue full"}`))
	}))
	defer ts.Close()
	c := New(ts.URL, "k")
	_, _, err := c.GetOrCreate(context.Background(), api.CreateSandboxRequest{Name: "a"})
	if !errdefs.IsKind(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("kind: %v", err)
	}
	if d, ok := errdefs.RetryAfter(err); !ok || d != 7*time.Second {
		t.Fatalf("RetryAfter = %v, %v; want 7s", d, ok)
	}
	withHeader.Store(false)
	_, _, err = c.GetOrCreate(context.Background(), api.CreateSandboxRequest{Name: "a"})
	if !errdefs.IsKind(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("kind: %v", err)
	}
	if d, ok := errdefs.RetryAfter(err); ok {
		t.Fatalf("RetryAfter without the header = %v", d)
	}
}

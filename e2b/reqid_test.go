package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/reqinfo"
)

// The request id the guard put in X-Request-Id goes into the E2B face's
// error bodies: the {code, message} JSON and Connect errors.
func TestErrorBodiesCarryRequestID(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set(reqinfo.Header, "req_abc")
	writeErr(w, errdefs.NotFound("sandbox x not found"))
	var e apiError
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != 404 || e.RequestID != "req_abc" {
		t.Fatalf("body %s", w.Body.String())
	}
	// Without a guard in front, the body is envd's as it was.
	w = httptest.NewRecorder()
	writeErr(w, errdefs.NotFound("x"))
	if b := w.Body.String(); b != `{"code":404,"message":"x"}`+"\n" {
		t.Fatalf("unguarded body %q", b)
	}

	ctx := reqinfo.With(context.Background(), &reqinfo.Info{ID: "req_abc"})
	err := withRequestID(ctx, connectErr(errdefs.NotFound("nope")))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || ce.Meta().Get(reqinfo.Header) != "req_abc" || len(ce.Details()) != 1 {
		t.Fatalf("connect error %v (meta %v, details %d)", err, ce.Meta(), len(ce.Details()))
	}
	v, derr := ce.Details()[0].Value()
	if derr != nil {
		t.Fatal(derr)
	}
	if s, ok := v.(interface{ GetValue() string }); !ok || s.GetValue() != "request id req_abc" {
		t.Fatalf("detail %v", v)
	}
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Every kind has a status, and the table says which.
func TestHTTPStatusEveryKind(t *testing.T) {
	want := map[string]int{
		"not_found": 404, "already_exists": 409, "invalid_argument": 400, "failed_precondition": 409,
		"expired": 410, "unavailable": 503, "resource_exhausted": 429, "no_space": 429,
		"permission_denied": 403, "unauthenticated": 401, "deadline_exceeded": 504, "internal": 500,
	}
	if len(errdefs.Kinds()) != len(want) {
		t.Fatalf("%d kinds, %d expected statuses: a kind was added without a status here", len(errdefs.Kinds()), len(want))
	}
	for _, k := range errdefs.Kinds() {
		err := errdefs.New(k, "m")
		w, ok := want[errdefs.WireCode(err)]
		if !ok {
			t.Fatalf("no expected status for %s", errdefs.WireCode(err))
		}
		if got := HTTPStatus(err); got != w {
			t.Errorf("%s: %d, want %d", errdefs.WireCode(err), got, w)
		}
		// Wrapped in a cause of another kind: still the outer kind's.
		if got := HTTPStatus(errdefs.New(k, "m: %w", errdefs.NotFound("x"))); got != w {
			t.Errorf("%s wrapping not_found: %d, want %d", errdefs.WireCode(err), got, w)
		}
	}
}

func TestHTTPStatusWithoutKind(t *testing.T) {
	for err, want := range map[error]int{
		errors.New("x"): 500,
		fmt.Errorf("x: %w", context.DeadlineExceeded): 504,
		context.Canceled:              503,
		&http.MaxBytesError{Limit: 1}: 413,
		errdefs.InvalidArgument("read: %w", &http.MaxBytesError{Limit: 1}): 400,
	} {
		if got := HTTPStatus(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}

// The public body never shows a wire-only code; the wire body does, and
// both rebuild a kind that the status table agrees with.
func TestErrorBodies(t *testing.T) {
	err := errdefs.NoSpace("write /x: no space left on device")
	pub, wire := ErrorBody(err), WireErrorBody(err)
	if pub.Code != "resource_exhausted" || wire.Code != "no_space" || pub.Message != wire.Message || pub.Message != err.Error() {
		t.Fatalf("public %+v, wire %+v", pub, wire)
	}
	if back := wire.Err(); !errdefs.IsKind(back, errdefs.ErrNoSpace) || HTTPStatus(back) != 429 {
		t.Fatalf("wire round trip lost the kind: %v", back)
	}
	if back := pub.Err(); !errdefs.IsKind(back, errdefs.ErrResourceExhausted) || errdefs.IsKind(back, errdefs.ErrNoSpace) {
		t.Fatalf("public round trip: %v", back)
	}
}

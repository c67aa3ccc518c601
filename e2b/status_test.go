package e2b

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Every kind has an E2B REST status and a Connect code, chosen by kind
// alone: the message is never read.
func TestE2BCodesEveryKind(t *testing.T) {
	want := map[string]struct {
		rest    int
		connect connect.Code
	}{
		"not_found":           {404, connect.CodeNotFound},
		"already_exists":      {409, connect.CodeAlreadyExists},
		"invalid_argument":    {400, connect.CodeInvalidArgument},
		"failed_precondition": {409, connect.CodeFailedPrecondition},
		"expired":             {410, connect.CodeFailedPrecondition},
		"unavailable":         {502, connect.CodeUnavailable},
		"resource_exhausted":  {429, connect.CodeResourceExhausted},
		"no_space":            {507, connect.CodeResourceExhausted},
		"permission_denied":   {403, connect.CodePermissionDenied},
		"unauthenticated":     {401, connect.CodeUnauthenticated},
		"deadline_exceeded":   {504, connect.CodeDeadlineExceeded},
		"internal":            {500, connect.CodeInternal},
	}
	kinds := errdefs.Kinds()
	if len(kinds) != len(want) || len(e2bCodes) != len(kinds) {
		t.Fatalf("%d kinds, %d table rows, %d expectations: a kind is missing from e2bCodes or from this test", len(kinds), len(e2bCodes), len(want))
	}
	for _, k := range kinds {
		code := errdefs.WireCode(errdefs.New(k, "x"))
		w := want[code]
		// The same kind with a message that mentions another ("disk",
		// "expired", "not found") and a cause of another kind.
		for _, err := range []error{
			errdefs.New(k, "x"),
			errdefs.New(k, "the disk is full, expired, not found, unavailable: %w", errdefs.NotFound("y")),
			fmt.Errorf("wrapped: %w", errdefs.New(k, "x")),
			errdefs.FromCode(code, "across the agent socket"),
		} {
			if got := statusOf(err); got != w.rest {
				t.Errorf("%s (%q): REST %d, want %d", code, err, got, w.rest)
			}
			var ce *connect.Error
			if !errors.As(connectErr(err), &ce) || ce.Code() != w.connect || ce.Message() != err.Error() {
				t.Errorf("%s (%q): Connect %v, want %v with the same message", code, err, ce, w.connect)
			}
		}
	}
}

// A full disk is 507 only when its kind says so; a message about a disk
// is not enough (it was, when the status was read from the text).
func TestNoSpaceByKindNotText(t *testing.T) {
	if got := statusOf(errdefs.ResourceExhausted("the disk quota of tenant a is used up")); got != 429 {
		t.Errorf("resource_exhausted mentioning a disk: %d, want 429", got)
	}
	if got := statusOf(errdefs.NoSpace("write /x: no space left on device")); got != 507 {
		t.Errorf("no_space: %d, want 507", got)
	}
}

func TestConnectCodeWithoutKind(t *testing.T) {
	for err, want := range map[error]connect.Code{
		fmt.Errorf("x: %w", context.Canceled):         connect.CodeCanceled,
		fmt.Errorf("x: %w", context.DeadlineExceeded): connect.CodeDeadlineExceeded,
		errors.New("plain"):                           connect.CodeInternal,
		// A kind wins over a context error in its cause.
		errdefs.Unavailable("agent did not answer: %w", context.DeadlineExceeded): connect.CodeUnavailable,
	} {
		var ce *connect.Error
		if !errors.As(connectErr(err), &ce) || ce.Code() != want {
			t.Errorf("%v: %v, want %v", err, ce, want)
		}
	}
	ce := connect.NewError(connect.CodeAborted, errors.New("as is"))
	if connectErr(ce) != error(ce) {
		t.Error("a Connect error without a kind must pass unchanged")
	}
}

package e2b

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// e2bCodes is the E2B face's kind → code table, beside api.HTTPStatus (the
// native one): rest is the status of the E2B REST API where E2B's differs
// from berth's (0: api.HTTPStatus's), connect the envd Connect code, which
// the SDK turns into its own errors (not_found → NotFoundError, …). Both are
// chosen by kind alone, never by reading a message.
var e2bCodes = map[error]struct {
	rest    int
	connect connect.Code
}{
	errdefs.ErrNotFound:           {0, connect.CodeNotFound},
	errdefs.ErrAlreadyExists:      {0, connect.CodeAlreadyExists},
	errdefs.ErrInvalidArgument:    {0, connect.CodeInvalidArgument},
	errdefs.ErrFailedPrecondition: {0, connect.CodeFailedPrecondition},
	errdefs.ErrExpired:            {0, connect.CodeFailedPrecondition},
	// E2B's API answers 502 when the sandbox behind a call cannot be
	// reached; the SDK expects it.
	errdefs.ErrUnavailable:       {502, connect.CodeUnavailable},
	errdefs.ErrResourceExhausted: {0, connect.CodeResourceExhausted},
	// A full disk is 507, which the SDK reports as "not enough disk space".
	errdefs.ErrNoSpace:          {507, connect.CodeResourceExhausted},
	errdefs.ErrPermissionDenied: {0, connect.CodePermissionDenied},
	errdefs.ErrUnauthenticated:  {0, connect.CodeUnauthenticated},
	errdefs.ErrDeadlineExceeded: {0, connect.CodeDeadlineExceeded},
	errdefs.ErrInternal:         {0, connect.CodeInternal},
}

// statusOf is err's status on the E2B REST API.
func statusOf(err error) int {
	if row, ok := e2bCodes[errdefs.Kind(err)]; ok && row.rest != 0 {
		return row.rest
	}
	return api.HTTPStatus(err)
}

// connectCode is err's Connect code. An error without a kind is judged by
// its context error, if any.
func connectCode(err error) connect.Code {
	if row, ok := e2bCodes[errdefs.Kind(err)]; ok {
		return row.connect
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}

package e2b

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/berth-sh/berth/internal/errdefs"
)

// connectErr maps berth's error taxonomy onto Connect codes, which the SDK
// turns into its own errors (not_found → NotFoundError, …).
func connectErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	default:
		switch errdefs.Code(err) {
		case "not_found":
			code = connect.CodeNotFound
		case "already_exists":
			code = connect.CodeAlreadyExists
		case "invalid_argument":
			code = connect.CodeInvalidArgument
		case "failed_precondition":
			code = connect.CodeFailedPrecondition
		case "unavailable":
			code = connect.CodeUnavailable
		case "resource_exhausted":
			code = connect.CodeResourceExhausted
		case "permission_denied":
			code = connect.CodePermissionDenied
		case "unauthenticated":
			code = connect.CodeUnauthenticated
		case "deadline_exceeded":
			code = connect.CodeDeadlineExceeded
		}
	}
	return connect.NewError(code, errors.New(err.Error()))
}

// errorInterceptor applies connectErr to every handler's error.
type errorInterceptor struct{}

func (errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, connectErr(err)
	}
}

func (errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return connectErr(next(ctx, conn))
	}
}

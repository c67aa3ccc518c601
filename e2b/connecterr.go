package e2b

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/reqinfo"
)

// connectErr maps berth's error taxonomy onto Connect codes through the
// E2B table (e2bCodes). An error that is already a Connect error, and has
// no errdefs kind of its own, passes as it is.
func connectErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errdefs.Kind(err) == nil && errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connectCode(err), errors.New(err.Error()))
}

// errorInterceptor applies connectErr to every handler's error.
type errorInterceptor struct{}

func (errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, withRequestID(ctx, connectErr(err))
	}
}

// withRequestID puts the request id (see package reqinfo) into a Connect
// error: as a google.protobuf.StringValue detail, which is part of the
// error's body, and as X-Request-Id metadata, which a streaming answer
// carries in its end-of-stream message.
func withRequestID(ctx context.Context, err error) error {
	var ce *connect.Error
	id := reqinfo.ID(ctx)
	if id == "" || !errors.As(err, &ce) {
		return err
	}
	if d, derr := connect.NewErrorDetail(wrapperspb.String("request id " + id)); derr == nil {
		ce.AddDetail(d)
	}
	ce.Meta().Set(reqinfo.Header, id)
	return ce
}

func (errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return withRequestID(ctx, connectErr(next(ctx, conn)))
	}
}

package errdefs

import (
	"context"
	"errors"
	"fmt"
)

// The kinds. Each has a stable machine-readable code (see Code).
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrDeadlineExceeded   = errors.New("deadline exceeded")
	ErrInternal           = errors.New("internal error")
)

// Error carries a human message and the kind it belongs to. Its message is
// used verbatim; the kind is only for errors.Is and for status mapping.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

// New returns an error of the given kind whose message is exactly the
// formatted text (the kind's own text is not appended).
func New(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// NotFound, InvalidArgument, ... are shorthands for New(kind, ...).
func NotFound(format string, args ...any) error { return New(ErrNotFound, format, args...) }
func AlreadyExists(format string, args ...any) error {
	return New(ErrAlreadyExists, format, args...)
}
func InvalidArgument(format string, args ...any) error {
	return New(ErrInvalidArgument, format, args...)
}
func FailedPrecondition(format string, args ...any) error {
	return New(ErrFailedPrecondition, format, args...)
}
func Unavailable(format string, args ...any) error { return New(ErrUnavailable, format, args...) }
func ResourceExhausted(format string, args ...any) error {
	return New(ErrResourceExhausted, format, args...)
}
func PermissionDenied(format string, args ...any) error {
	return New(ErrPermissionDenied, format, args...)
}
func Unauthenticated(format string, args ...any) error {
	return New(ErrUnauthenticated, format, args...)
}
func Internal(format string, args ...any) error { return New(ErrInternal, format, args...) }

var codes = []struct {
	kind error
	code string
}{
	{ErrNotFound, "not_found"},
	{ErrAlreadyExists, "already_exists"},
	{ErrInvalidArgument, "invalid_argument"},
	{ErrFailedPrecondition, "failed_precondition"},
	{ErrUnavailable, "unavailable"},
	{ErrResourceExhausted, "resource_exhausted"},
	{ErrPermissionDenied, "permission_denied"},
	{ErrUnauthenticated, "unauthenticated"},
	{ErrDeadlineExceeded, "deadline_exceeded"},
	{ErrInternal, "internal"},
}

// Code returns the stable code of err's kind ("not_found", ...). Errors that
// wrap no kind are "internal". Context deadline errors are "deadline_exceeded"
// and cancellations "unavailable".
func Code(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range codes {
		if errors.Is(err, c.kind) {
			return c.code
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline_exceeded"
	}
	if errors.Is(err, context.Canceled) {
		return "unavailable"
	}
	return "internal"
}

// FromCode is the inverse of Code: it rebuilds an error of the kind named by
// code with the given message. Unknown codes become internal errors. Clients
// use it so that errors.Is works across the wire.
func FromCode(code, msg string) error {
	for _, c := range codes {
		if c.code == code {
			return &Error{Kind: c.kind, Msg: msg}
		}
	}
	return &Error{Kind: ErrInternal, Msg: msg}
}

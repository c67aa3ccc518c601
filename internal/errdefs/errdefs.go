package errdefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// ErrExpired refines ErrFailedPrecondition (errors.Is matches both):
	// the thing existed but its time ran out (a backup past its TTL). It
	// has its own code, "expired" (HTTP 410).
	ErrExpired error = &refined{msg: "expired", parent: ErrFailedPrecondition}
	// ErrNoSpace refines ErrResourceExhausted: a disk or a disk quota is
	// full (ENOSPC, EDQUOT, SQLITE_FULL). Its public code stays
	// "resource_exhausted", so native clients see what they always saw; the
	// E2B face answers it 507. Between berth's own processes (the agent
	// socket) it travels as the wire code "no_space" (see WireCode).
	ErrNoSpace error = &refined{msg: "no space left", parent: ErrResourceExhausted}
)

// refined is a kind that is also a more general kind.
type refined struct {
	msg    string
	parent error
}

func (r *refined) Error() string { return r.msg }
func (r *refined) Unwrap() error { return r.parent }

// Error carries a human message, the kind it belongs to and, optionally, the
// error that caused it. Its message is used verbatim; the kind is for
// errors.Is and status mapping, the cause for errors.Is and errors.As on
// what lies underneath (syscall.ENOSPC, *sqlite.Error, ...).
type Error struct {
	Kind  error
	Msg   string
	Cause error // nil when the error was made without a %w argument
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives the kind first, then the cause: errors.Is and errors.As walk
// both, and Kind (hence Code) takes the first kind it meets, which is this
// error's own and never one found deeper in the cause.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// New returns an error of the given kind whose message is exactly the
// formatted text (the kind's own text is not appended). A %w verb formats
// like %v, and its argument becomes the error's Cause, as with fmt.Errorf;
// a nil %w argument reads "<nil>" (as %v would) and is no cause.
func New(kind error, format string, args ...any) error {
	if !strings.Contains(format, "%w") {
		return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
	}
	// The message is the %v rendering, so that converting a call site from
	// %v to %w never changes what the user reads (fmt.Errorf would print a
	// nil %w argument as "%!w(<nil>)").
	e := &Error{Kind: kind, Msg: fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), args...)}
	switch w := fmt.Errorf(format, args...).(type) {
	case interface{ Unwrap() error }:
		e.Cause = w.Unwrap()
	case interface{ Unwrap() []error }:
		if causes := w.Unwrap(); len(causes) == 1 {
			e.Cause = causes[0]
		} else if len(causes) > 1 {
			e.Cause = errors.Join(causes...)
		}
	}
	return e
}

// Wrap is New with the cause given explicitly rather than through %w: the
// message is the formatted text, the cause is reachable with errors.Is/As
// but not part of the message.
func Wrap(kind, cause error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Cause: cause}
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
func Expired(format string, args ...any) error  { return New(ErrExpired, format, args...) }
func NoSpace(format string, args ...any) error  { return New(ErrNoSpace, format, args...) }

// codes lists every kind with its wire code and its public code (the one
// native and E2B clients see; it differs only for refinements that have no
// public code of their own).
var codes = []struct {
	kind         error
	wire, public string
}{
	{ErrNotFound, "not_found", "not_found"},
	{ErrAlreadyExists, "already_exists", "already_exists"},
	{ErrInvalidArgument, "invalid_argument", "invalid_argument"},
	{ErrExpired, "expired", "expired"},
	{ErrFailedPrecondition, "failed_precondition", "failed_precondition"},
	{ErrUnavailable, "unavailable", "unavailable"},
	{ErrNoSpace, "no_space", "resource_exhausted"},
	{ErrResourceExhausted, "resource_exhausted", "resource_exhausted"},
	{ErrPermissionDenied, "permission_denied", "permission_denied"},
	{ErrUnauthenticated, "unauthenticated", "unauthenticated"},
	{ErrDeadlineExceeded, "deadline_exceeded", "deadline_exceeded"},
	{ErrInternal, "internal", "internal"},
}

// Kinds returns every kind, refinements included, for tables that must
// cover them all (the status maps and their tests).
func Kinds() []error {
	out := make([]error, len(codes))
	for i, c := range codes {
		out[i] = c.kind
	}
	return out
}

// Kind returns err's kind: the first kind met walking err's chain depth
// first (an Error's own kind comes before anything in its cause), or nil if
// the chain holds none.
func Kind(err error) error {
	for err != nil {
		for _, c := range codes {
			if err == c.kind {
				return err
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if k := Kind(e); k != nil {
					return k
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// IsKind reports whether err's kind (see Kind) is kind or refines it. Branch
// on it, not on errors.Is, when the question is what kind of failure err
// reports: errors.Is(err, ErrNotFound) also holds for an unavailable error
// whose cause was a not-found.
func IsKind(err, kind error) bool {
	k := Kind(err)
	return k != nil && errors.Is(k, kind)
}

// Code returns the stable public code of err's kind ("not_found", ...).
// Errors that wrap no kind are "internal". Context deadline errors are
// "deadline_exceeded" and cancellations "unavailable".
func Code(err error) string { return code(err, false) }

// WireCode is Code for berth's own hops (the agent socket): a refinement
// without a public code keeps its own ("no_space"), so FromCode on the
// other side rebuilds the same kind.
func WireCode(err error) string { return code(err, true) }

func code(err error, wire bool) string {
	if err == nil {
		return ""
	}
	if k := Kind(err); k != nil {
		for _, c := range codes {
			if c.kind == k {
				if wire {
					return c.wire
				}
				return c.public
			}
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

// FromCode is the inverse of Code and WireCode: it rebuilds an error of the
// kind named by code with the given message. Unknown codes become internal
// errors. Clients use it so that errors.Is works across the wire.
func FromCode(code, msg string) error {
	for _, c := range codes {
		if c.wire == code {
			return &Error{Kind: c.kind, Msg: msg}
		}
	}
	return &Error{Kind: ErrInternal, Msg: msg}
}

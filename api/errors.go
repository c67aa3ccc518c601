package api

import (
	"errors"
	"net/http"

	"github.com/berth-sh/berth/internal/errdefs"
)

// httpStatus is berth's one kind → HTTP status table. Every face starts
// from it; the E2B face's own codes sit in one table beside it, keyed by the
// same kinds (e2b's e2bCodes).
var httpStatus = map[error]int{
	errdefs.ErrNotFound:           http.StatusNotFound,
	errdefs.ErrAlreadyExists:      http.StatusConflict,
	errdefs.ErrInvalidArgument:    http.StatusBadRequest,
	errdefs.ErrFailedPrecondition: http.StatusConflict,
	errdefs.ErrExpired:            http.StatusGone,
	errdefs.ErrUnavailable:        http.StatusServiceUnavailable,
	errdefs.ErrResourceExhausted:  http.StatusTooManyRequests,
	errdefs.ErrNoSpace:            http.StatusTooManyRequests, // as resource_exhausted: its public code
	errdefs.ErrPermissionDenied:   http.StatusForbidden,
	errdefs.ErrUnauthenticated:    http.StatusUnauthorized,
	errdefs.ErrDeadlineExceeded:   http.StatusGatewayTimeout,
	errdefs.ErrInternal:           http.StatusInternalServerError,
}

// HTTPStatus maps an error to its HTTP status. It is the only place where
// berth decides which status an error kind gets. An error without a kind
// gets the status of the kind its code names (a context deadline is
// deadline_exceeded, 504; anything unknown internal, 500).
func HTTPStatus(err error) int {
	var tooBig *http.MaxBytesError
	var kinded *errdefs.Error
	// A body over its limit is 413, unless it is only the cause of an
	// errdefs error that says otherwise.
	if errors.As(err, &tooBig) && !(errors.As(err, &kinded) && errors.As(kinded.Cause, &tooBig)) {
		return http.StatusRequestEntityTooLarge
	}
	k := errdefs.Kind(err)
	if k == nil {
		k = errdefs.Kind(errdefs.FromCode(errdefs.Code(err), ""))
	}
	if st, ok := httpStatus[k]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// ErrorBody converts err to its wire form for clients: the public code.
func ErrorBody(err error) Error {
	return Error{Code: errdefs.Code(err), Message: err.Error()}
}

// WireErrorBody is ErrorBody for berth's internal hops (the agent's
// answers to the host): the code is errdefs.WireCode, so a refinement with
// no public code of its own (no_space) reaches the other side intact.
func WireErrorBody(err error) Error {
	return Error{Code: errdefs.WireCode(err), Message: err.Error()}
}

// Err turns a wire error back into a Go error of the same kind.
func (e *Error) Err() error { return errdefs.FromCode(e.Code, e.Message) }

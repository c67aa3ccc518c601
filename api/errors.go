package api

import (
	"errors"
	"net/http"

	"github.com/berth-sh/berth/internal/errdefs"
)

// HTTPStatus maps an error to its HTTP status. It is the only place where
// berth decides which status an error kind gets.
func HTTPStatus(err error) int {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return http.StatusRequestEntityTooLarge
	}
	switch errdefs.Code(err) {
	case "not_found":
		return http.StatusNotFound
	case "already_exists":
		return http.StatusConflict
	case "invalid_argument":
		return http.StatusBadRequest
	case "failed_precondition":
		return http.StatusConflict
	case "unavailable":
		return http.StatusServiceUnavailable
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "permission_denied":
		return http.StatusForbidden
	case "unauthenticated":
		return http.StatusUnauthorized
	case "deadline_exceeded":
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody converts err to its wire form.
func ErrorBody(err error) Error {
	return Error{Code: errdefs.Code(err), Message: err.Error()}
}

// Err turns a wire error back into a Go error of the same kind.
func (e *Error) Err() error { return errdefs.FromCode(e.Code, e.Message) }

package durable

import "github.com/berth-sh/berth/internal/errdefs"

// Errors a method returns keep their kind over RPC: these map to HTTP
// 404, 400, 409, 403 and 429 (see api.HTTPStatus). Any other error is 500.
func NotFound(format string, args ...any) error { return errdefs.NotFound(format, args...) }
func InvalidArgument(format string, args ...any) error {
	return errdefs.InvalidArgument(format, args...)
}
func FailedPrecondition(format string, args ...any) error {
	return errdefs.FailedPrecondition(format, args...)
}
func PermissionDenied(format string, args ...any) error {
	return errdefs.PermissionDenied(format, args...)
}
func ResourceExhausted(format string, args ...any) error {
	return errdefs.ResourceExhausted(format, args...)
}

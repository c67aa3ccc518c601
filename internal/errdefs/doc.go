// Package errdefs is berth's single error taxonomy.
//
// Every error that crosses a package boundary wraps exactly one of the kinds
// below (with %w), so callers branch with errors.Is and the HTTP layer maps a
// kind to a status in exactly one place (api.HTTPStatus). Messages are written
// for the person reading them: "snapshot 3f2a not found", not "ENOENT".
package errdefs

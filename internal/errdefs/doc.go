// Package errdefs is berth's single error taxonomy.
//
// Every error that crosses a package boundary wraps exactly one of the kinds
// below, so callers branch on the kind and the HTTP layer maps a kind to a
// status in exactly one place (api.HTTPStatus; the E2B face's own codes sit
// in one table beside it). Messages are written for the person reading them:
// "snapshot 3f2a not found", not "ENOENT".
//
// An Error is a kind, a message and an optional cause. The cause comes from
// a %w verb, as with fmt.Errorf:
//
//	errdefs.Unavailable("sandbox agent unreachable at %s: %w", sock, err)
//
// The message reads exactly as it would with %v; the cause stays reachable,
// so errors.Is(err, syscall.ENOSPC) and errors.As(err, &sqliteErr) work
// through it. (Wrap sets a cause that the message does not quote.)
//
// The kind of an error is the first kind in its chain: the outer Error's
// own, never one found in its cause. Kind, IsKind and Code answer with it;
// an unavailable error caused by a not-found is unavailable (503), even
// though errors.Is(err, ErrNotFound) also holds. Branch with IsKind when the
// question is "what failed, as reported".
//
// Refinements are kinds that are also a more general kind: ErrExpired (a
// failed precondition with its own code, "expired") and ErrNoSpace (a full
// disk; publicly "resource_exhausted", on berth's internal hops "no_space",
// see WireCode). FromCode rebuilds a kind from either code on the far side
// of a socket, without the cause, which does not travel.
//
// Never branch on an error's text: add a kind, a sentinel or a typed error
// instead.
package errdefs

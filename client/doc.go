// Package client is the Go SDK for berth's HTTP API; the berth CLI is built on
// it. One Client holds one keep-alive connection pool, so a process should
// create it once and share it: exec round trips are measured in milliseconds
// and a fresh transport per call would cost a TCP handshake each time.
//
// Errors from the server come back as internal/errdefs kinds, so
// errors.Is(err, errdefs.ErrNotFound) works across the wire. Streams (exec
// output, image progress) are server-sent events that must end with a
// terminal event; a stream that just stops is reported as an Unavailable
// error, never as an exit code.
package client

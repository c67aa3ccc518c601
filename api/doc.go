// Package api holds berth's wire contract: the JSON types exchanged by the
// HTTP API, the Go SDK, the CLI and the in-sandbox agent, and the single
// mapping from error kinds to HTTP statuses. It depends only on the standard
// library and internal/errdefs so that the static berth-agent can import it.
// openapi.yaml in this directory describes the HTTP API.
package api

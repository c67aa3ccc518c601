// Package metrics owns berth's Prometheus registry and serves it on
// /metrics (prometheus/client_golang, text exposition).
//
// No other package imports prometheus. Each instrumented package declares
// the small interface it reports through (node/local.Meter,
// egress.Meter, server.GuardOptions.Observe) and the daemon hands it this
// package's *Registry, which implements all of them. Levels that are read
// rather than counted (sandboxes by state, pool levels, the admission
// queue, snapshot bytes) are collected at scrape time from the Sources
// the daemon gives New, so nothing has to push them.
//
// Label values are bounded: the API's route label is the route pattern
// ("POST /v1/sandboxes/{name}/exec"), never the raw path, so sandbox names
// cannot grow the series count; the other labels come from fixed sets
// (start path, verdict, direction, repair kind, state).
//
// The endpoint is protected (Handler): by its own bearer token
// (serve --metrics-token-file) on the main listener, or by being served
// on a separate listener (serve --metrics-listen) that the operator keeps
// private. Without either, /metrics on the main listener answers 401.
package metrics

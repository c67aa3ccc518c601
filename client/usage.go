package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/api"
)

// SandboxMetrics returns a sandbox's latest usage sample and history.
func (c *Client) SandboxMetrics(ctx context.Context, name string) (api.SandboxMetrics, error) {
	var m api.SandboxMetrics
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name)+"/metrics", nil, nil, &m)
	return m, err
}

// Usage returns tenant's hourly usage records in [from, to) (zero times:
// the server's defaults, the last 24 hours).
func (c *Client) Usage(ctx context.Context, tenant string, from, to time.Time) (api.UsageReport, error) {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	if !from.IsZero() {
		q.Set("from", from.UTC().Format(time.RFC3339))
	}
	if !to.IsZero() {
		q.Set("to", to.UTC().Format(time.RFC3339))
	}
	var rep api.UsageReport
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/usage", q, nil, &rep)
	return rep, err
}

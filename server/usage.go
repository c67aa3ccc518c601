package server

import (
	"context"
	"net/http"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// Usage is the node's usage sampler as the API reads it (package
// metering's Sampler).
type Usage interface {
	// Metrics is name's latest sample and history; ok is false when it
	// is not running here or has no sample yet.
	Metrics(name string) (api.SandboxMetrics, bool)
	// Usage is tenant's hourly records in [from, to).
	Usage(ctx context.Context, tenant string, from, to time.Time) (api.UsageReport, error)
}

// sandboxMetrics serves GET /v1/sandboxes/{name}/metrics. The sandbox is
// looked up first, so a tenant reaches only its own (and a missing name
// is 404); a sandbox that does not run answers an empty history.
func (s *server) sandboxMetrics(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	if _, err := s.b.Get(r.Context(), name); err != nil {
		return err
	}
	if s.opts.Usage == nil {
		return errdefs.FailedPrecondition("usage sampling is off on this server (serve --no-usage)")
	}
	m, _ := s.opts.Usage.Metrics(name)
	writeJSON(w, http.StatusOK, m)
	return nil
}

// maxUsageSpan bounds one GET /v1/usage.
const maxUsageSpan = 366 * 24 * time.Hour

// usage serves GET /v1/usage?tenant=&from=&to= (RFC 3339; default the
// last 24 hours). A tenant's key reads its own records only; the
// operator names the tenant (none: the sandboxes of no tenant).
func (s *server) usage(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Usage == nil {
		return errdefs.FailedPrecondition("usage sampling is off on this server (serve --no-usage)")
	}
	q := r.URL.Query()
	tenant := q.Get("tenant")
	if t := policy.TenantFrom(r.Context()); t != "" {
		if tenant != "" && tenant != t {
			return errdefs.PermissionDenied("tenant %q's key cannot read the usage of tenant %q", t, tenant)
		}
		tenant = t
	}
	now := time.Now().UTC()
	from, to := now.Add(-24*time.Hour), now
	var err error
	if v := q.Get("from"); v != "" {
		if from, err = time.Parse(time.RFC3339, v); err != nil {
			return errdefs.InvalidArgument("from %q: want an RFC 3339 time (2026-01-02T15:04:05Z)", v)
		}
	}
	if v := q.Get("to"); v != "" {
		if to, err = time.Parse(time.RFC3339, v); err != nil {
			return errdefs.InvalidArgument("to %q: want an RFC 3339 time (2026-01-02T15:04:05Z)", v)
		}
	}
	if !from.Before(to) {
		return errdefs.InvalidArgument("from (%s) must be before to (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if to.Sub(from) > maxUsageSpan {
		return errdefs.InvalidArgument("from..to spans %s: at most %s per request", to.Sub(from).Round(time.Hour), maxUsageSpan)
	}
	rep, err := s.opts.Usage.Usage(r.Context(), tenant, from, to)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

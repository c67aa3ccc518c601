package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// buildImage runs a Dockerfile build: the body is the context as a tar
// stream (hostile: the builder unpacks it with the image unpacker's
// rules), the options are query parameters (api.BuildRequest). Progress
// and the build log stream like a pull's (longOp).
func (s *server) buildImage(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Builds == nil {
		return errdefs.FailedPrecondition("this server does not build images")
	}
	req, err := buildRequest(r)
	if err != nil {
		return err
	}
	return s.longOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.opts.Builds.BuildImage(ctx, req, r.Body, progress)
	})
}

func buildRequest(r *http.Request) (api.BuildRequest, error) {
	q := r.URL.Query()
	req := api.BuildRequest{Name: q.Get("name"), Dockerfile: q.Get("dockerfile"), Target: q.Get("target"), Instance: q.Get("instance")}
	if req.Name != "" {
		if err := validateRef("name", req.Name); err != nil {
			return req, err
		}
	}
	switch v := q.Get("noCache"); v {
	case "", "false", "0":
	case "true", "1":
		req.NoCache = true
	default:
		return req, errdefs.InvalidArgument("noCache must be true or false, not %q", v)
	}
	for _, kv := range q["buildArg"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return req, errdefs.InvalidArgument("buildArg %q must be KEY=VALUE", kv)
		}
		if req.BuildArgs == nil {
			req.BuildArgs = map[string]string{}
		}
		req.BuildArgs[k] = v
	}
	if n := q.Get("network"); n != "" {
		var p api.NetworkPolicy
		dec := json.NewDecoder(strings.NewReader(n))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return req, errdefs.InvalidArgument("network must be the JSON of a network policy: %v", err)
		}
		req.Network = &p
	}
	return req, nil
}

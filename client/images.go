package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// ListImages lists the local image store.
func (c *Client) ListImages(ctx context.Context) ([]api.Image, error) {
	var list api.ImageList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/images", nil, nil, &list)
	return list.Images, err
}

// PushImage pushes the stored image req.Image to a registry as req.Ref
// (operator key only). progress (may be nil) is called for each progress
// event; the answer is the image with Ref set to where it went.
func (c *Client) PushImage(ctx context.Context, req api.PushRequest, progress func(api.Progress)) (api.Image, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return api.Image{}, errdefs.InvalidArgument("encoding push request: %w", err)
	}
	return c.longOp(ctx, request{method: http.MethodPost, path: "/v1/images/push", body: bytesReader(b), contentType: "application/json"}, progress)
}

// PullImage pulls req.Ref and optionally names it. progress (may be nil) is
// called for each progress event.
func (c *Client) PullImage(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return api.Image{}, errdefs.InvalidArgument("encoding pull request: %w", err)
	}
	return c.longOp(ctx, request{method: http.MethodPost, path: "/v1/images/pull", body: bytesReader(b), contentType: "application/json"}, progress)
}

// ImportImage streams a `docker save` or OCI-layout tarball from r into the
// store, naming it name (may be empty).
func (c *Client) ImportImage(ctx context.Context, name string, r io.Reader, progress func(api.Progress)) (api.Image, error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	return c.longOp(ctx, request{method: http.MethodPost, path: "/v1/images/import", query: q, body: r, contentType: "application/x-tar"}, progress)
}

// BuildBase builds the default debian-trixie image from Debian packages.
func (c *Client) BuildBase(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
	return c.longOp(ctx, request{method: http.MethodPost, path: "/v1/images/build-base"}, progress)
}

// RemoveImage deletes an image by name, reference or digest.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	// Keep the slashes of a reference ("docker.io/library/alpine:3"):
	// the route takes the rest of the path. Escape each segment.
	segs := strings.Split(ref, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/images/"+strings.Join(segs, "/"), nil, nil, nil)
	return err
}

// longOp runs a pull, import or build. Without a progress func it asks
// for the plain JSON answer; with one it follows the event stream, which
// must end with a done or error event.
func (c *Client) longOp(ctx context.Context, r request, progress func(api.Progress)) (api.Image, error) {
	if progress == nil {
		res, err := c.do(ctx, r)
		if err != nil {
			return api.Image{}, err
		}
		defer closeBody(res.Body)
		var img api.Image
		if err := json.NewDecoder(res.Body).Decode(&img); err != nil {
			return api.Image{}, c.readError(ctx, "decoding image", err)
		}
		return img, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.accept = "text/event-stream"
	res, err := c.do(ctx, r)
	if err != nil {
		return api.Image{}, err
	}
	// After a terminal event, read the stream's end so that the
	// connection goes back to the pool; otherwise drop it.
	finished := false
	defer func() {
		if finished {
			closeBody(res.Body)
		} else {
			cancel()
			res.Body.Close()
		}
	}()
	if err := expectEventStream(res); err != nil {
		return api.Image{}, err
	}
	var img api.Image
	err = readEvents(res.Body, func(ev string, data []byte) (bool, error) {
		var p api.Progress
		if err := json.Unmarshal(data, &p); err != nil {
			return false, errdefs.Internal("malformed %s event from server: %w", ev, err)
		}
		switch ev {
		case "progress":
			progress(p)
		case "done":
			if p.Image == nil {
				return false, errdefs.Internal("done event without an image")
			}
			img = *p.Image
			finished = true
			return true, nil
		case "error":
			if p.Error == nil {
				return false, errdefs.Internal("error event without an error")
			}
			finished = true
			return false, p.Error.Err()
		}
		return false, nil
	})
	switch {
	case err == nil:
		return img, nil
	case errors.Is(err, errStreamEnded):
		return api.Image{}, errdefs.Unavailable("%s: the progress stream ended before the operation finished; its outcome is unknown", r.path)
	case isErrdefs(err):
		return api.Image{}, err
	}
	return api.Image{}, c.readError(ctx, r.path+": reading the progress stream", err)
}

// BuildImage runs a Dockerfile build on the server. contextTar is the
// build context as a tar stream (TarContext makes one from a directory).
func (c *Client) BuildImage(ctx context.Context, req api.BuildRequest, contextTar io.Reader, progress func(api.Progress)) (api.Image, error) {
	q := url.Values{}
	for k, v := range map[string]string{"name": req.Name, "dockerfile": req.Dockerfile, "target": req.Target, "instance": req.Instance} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.NoCache {
		q.Set("noCache", "true")
	}
	for k, v := range req.BuildArgs {
		q.Add("buildArg", k+"="+v)
	}
	if req.Network != nil {
		b, err := json.Marshal(req.Network)
		if err != nil {
			return api.Image{}, errdefs.InvalidArgument("encoding network policy: %w", err)
		}
		q.Set("network", string(b))
	}
	return c.longOp(ctx, request{method: http.MethodPost, path: "/v1/images/builds", query: q, body: contextTar, contentType: "application/x-tar"}, progress)
}

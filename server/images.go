package server

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

func (s *server) listImages(w http.ResponseWriter, r *http.Request) error {
	imgs, err := s.b.ListImages(r.Context())
	if err != nil {
		return err
	}
	if imgs == nil {
		imgs = []api.Image{}
	}
	writeJSON(w, http.StatusOK, api.ImageList{Images: imgs})
	return nil
}

func (s *server) pullImage(w http.ResponseWriter, r *http.Request) error {
	var req api.PullRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validatePullRef(req.Ref); err != nil {
		return err
	}
	if req.Name != "" {
		if err := validateRef("name", req.Name); err != nil {
			return err
		}
	}
	return s.longOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.b.PullImage(ctx, req, progress)
	})
}

// pushImage pushes a stored image to a registry. It is the operator's:
// a tenant key gets 403 (images are the host's, and a push sends them
// wherever the caller says).
func (s *server) pushImage(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Pushes == nil {
		return errdefs.FailedPrecondition("this server does not push images")
	}
	if policy.TenantFrom(r.Context()) != "" {
		return errdefs.PermissionDenied("pushing images is the operator's: use the daemon's own API key")
	}
	var req api.PushRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateRef("image", req.Image); err != nil {
		return err
	}
	if err := validatePullRef(req.Ref); err != nil {
		return err
	}
	return s.longOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.opts.Pushes.PushImage(ctx, req, progress)
	})
}

func (s *server) importImage(w http.ResponseWriter, r *http.Request) error {
	name := r.URL.Query().Get("name")
	if name != "" {
		if err := validateRef("name", name); err != nil {
			return err
		}
	}
	// The body is a tar stream of any size (docker save output is often
	// GBs); the backend's unpacker is what treats it as hostile input.
	return s.longOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.b.ImportImage(ctx, name, r.Body, progress)
	})
}

func (s *server) buildBase(w http.ResponseWriter, r *http.Request) error {
	return s.longOp(w, r, func(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
		return s.b.BuildBase(ctx, progress)
	})
}

func (s *server) removeImage(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("ref")
	if err := validateRef("image reference", ref); err != nil {
		return err
	}
	if err := s.b.RemoveImage(r.Context(), ref); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// longOp runs a pull, import or build. With Accept: text/event-stream it
// streams progress events and ends with exactly one "done" (carrying the
// image) or "error" event; otherwise it answers with the image as JSON.
func (s *server) longOp(w http.ResponseWriter, r *http.Request, op func(context.Context, func(api.Progress)) (api.Image, error)) error {
	if !wantsEventStream(r) {
		img, err := op(r.Context(), nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, img)
		return nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := newSSEStream(w, cancel)
	stop := st.keepAlive(s.pingInterval)
	img, err := op(ctx, func(p api.Progress) {
		// The terminal event is ours to send, from op's result: a
		// backend's own Done or Error must not end the stream early or
		// twice.
		p.Done, p.Error, p.Image = false, nil, nil
		_ = st.event("progress", p)
	})
	stop()
	if err != nil {
		if st.closeIfUnstarted() {
			return err
		}
		e := errorBody(w, err)
		_ = st.finish("error", api.Progress{Error: &e})
		return nil
	}
	_ = st.finish("done", api.Progress{Done: true, Image: &img})
	return nil
}

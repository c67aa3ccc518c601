package server

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *server) callObject(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Objects == nil {
		return errdefs.NotFound("no object class %q (this berth serves no durable objects)", r.PathValue("class"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if mbe, ok := err.(*http.MaxBytesError); ok {
			return errTooLarge{mbe}
		}
		return errdefs.InvalidArgument("read request body: %w", err)
	}
	if len(body) > 0 && !json.Valid(body) {
		return errdefs.InvalidArgument("request body is not JSON")
	}
	out, err := s.opts.Objects.CallObject(r.Context(), r.PathValue("class"), r.PathValue("id"), r.PathValue("method"), body)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(out, '\n'))
	return nil
}

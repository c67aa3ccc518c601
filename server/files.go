package server

import (
	"io"
	"net/http"

	"github.com/berth-sh/berth/api"
)

// Files routes. Paths are checked for shape only (validatePath); the agent
// resolves them inside the sandbox.

func (s *server) readFile(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	rc, err := s.b.ReadFile(r.Context(), name, p)
	if err != nil {
		return err
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Streamed in fixed chunks, never buffered whole. An error after the
	// first byte makes serve abort the connection, so the client sees a
	// broken download instead of a short file that looks complete.
	buf := make([]byte, 64<<10)
	_, err = io.CopyBuffer(writerOnly{w}, rc, buf)
	return err
}

// writerOnly hides any ReadFrom of the underlying writer so CopyBuffer
// uses our bounded buffer.
type writerOnly struct{ io.Writer }

func (s *server) writeFile(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	mode, err := queryMode(r, 0o644)
	if err != nil {
		return err
	}
	// No size cap here on purpose: uploads are streams and the sandbox's
	// disk quota is what bounds them.
	if err := s.b.WriteFile(r.Context(), name, p, r.Body, mode); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) listFiles(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	files, err := s.b.ListFiles(r.Context(), name, p, recursive)
	if err != nil {
		return err
	}
	if files == nil {
		files = []api.FileInfo{}
	}
	writeJSON(w, http.StatusOK, api.FileList{Files: files})
	return nil
}

func (s *server) statFile(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	fi, err := s.b.Stat(r.Context(), name, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fi)
	return nil
}

func (s *server) fileExists(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	ok, err := s.b.Exists(r.Context(), name, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ExistsResponse{Exists: ok})
	return nil
}

func (s *server) mkdir(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.MkdirRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validatePath("path", req.Path); err != nil {
		return err
	}
	if req.Mode > 0o7777 {
		return errInvalidMode(req.Mode)
	}
	if err := s.b.Mkdir(r.Context(), name, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) removeFile(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	if err := s.b.Remove(r.Context(), name, p, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) rename(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.RenameRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validatePath("from", req.From); err != nil {
		return err
	}
	if err := validatePath("to", req.To); err != nil {
		return err
	}
	if err := s.b.Rename(r.Context(), name, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

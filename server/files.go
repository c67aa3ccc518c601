package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/filetype"
)

// Files routes. Paths are checked for shape only (validatePath); the agent
// resolves them inside the sandbox.
//
// Every files route (and watch) takes ?user= (the acting user: relative
// paths start in that user's home, new files and directories belong to that
// user) and ?session= (relative paths start in that session's cwd). They
// reach the agent through the request context (agentclient.FileOptions),
// which the backend passes on untouched.

// fileCtx returns r's context carrying the file options of its query.
func fileCtx(r *http.Request) (context.Context, error) {
	q := r.URL.Query()
	o := agentclient.FileOptions{User: q.Get("user"), Session: q.Get("session")}
	if err := validateUser(o.User); err != nil {
		return nil, err
	}
	if o.Session != "" {
		if err := validateDevID("session", o.Session); err != nil {
			return nil, err
		}
	}
	switch v := q.Get("hidden"); v {
	case "":
	default:
		show, err := strconv.ParseBool(v)
		if err != nil {
			return nil, errdefs.InvalidArgument("query parameter hidden: want true or false, got %q", v)
		}
		o.HideDotFiles = !show
	}
	switch t := q.Get("type"); t {
	case "", "file", "dir":
		o.RemoveType = t
	default:
		return nil, errdefs.InvalidArgument("query parameter type: want file or dir, got %q", t)
	}
	return agentclient.WithFileOptions(r.Context(), o), nil
}

func (s *server) readFile(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	p, err := queryPath(r)
	if err != nil {
		return err
	}
	ctx, err := fileCtx(r)
	if err != nil {
		return err
	}
	rc, err := s.b.ReadFile(ctx, name, p)
	if err != nil {
		return err
	}
	defer rc.Close()
	// The type comes from the name and the first bytes (internal/filetype,
	// the same rules as stat and listing metadata). A download is data,
	// never a page: nosniff, and a sandboxing CSP in case a browser
	// renders an HTML or SVG file.
	br := bufio.NewReaderSize(rc, 64<<10)
	head, err := br.Peek(filetype.SniffLen)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return err
	}
	mt, binary := filetype.Detect(p, head)
	w.Header().Set("Content-Type", mt)
	w.Header().Set(api.BinaryHeader, strconv.FormatBool(binary))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	// Streamed in fixed chunks, never buffered whole. An error after the
	// first byte makes serve abort the connection, so the client sees a
	// broken download instead of a short file that looks complete.
	buf := make([]byte, 64<<10)
	_, err = io.CopyBuffer(writerOnly{w}, br, buf)
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
	// No mode: 0644 for a new file, unchanged for an existing one.
	mode, err := queryMode(r, 0)
	if err != nil {
		return err
	}
	ctx, err := fileCtx(r)
	if err != nil {
		return err
	}
	// No size cap here on purpose: uploads are streams and the sandbox's
	// disk quota is what bounds them.
	if err := s.b.WriteFile(ctx, name, p, r.Body, mode); err != nil {
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
	ctx, err := fileCtx(r)
	if err != nil {
		return err
	}
	files, err := s.b.ListFiles(ctx, name, p, recursive)
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
	ctx, err := fileCtx(r)
	if err != nil {
		return err
	}
	fi, err := s.b.Stat(ctx, name, p)
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
	ctx, err := fileCtx(r)
	if err != nil {
		return err
	}
	ok, err := s.b.Exists(ctx, name, p)
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
	ctx, err := fileCtx(r)
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
	if err := s.b.Mkdir(ctx, name, req); err != nil {
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
	ctx, err := fileCtx(r)
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
	if err := s.b.Remove(ctx, name, p, recursive); err != nil {
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
	ctx, err := fileCtx(r)
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
	if err := s.b.Rename(ctx, name, req); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

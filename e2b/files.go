package e2b

import (
	"bufio"
	"compress/gzip"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/filetype"
)

// fileEntry is envd's REST EntryInfo (the answer of POST /files).
type fileEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// writeFileErr answers a /files failure in envd's form ({code, message});
// a sandbox that is gone is the proxy's 502.
func writeFileErr(w http.ResponseWriter, id string, err error) {
	if errdefs.IsKind(err, errdefs.ErrUnavailable) {
		writeGone(w, id)
		return
	}
	writeErr(w, err)
}

func checkUser(u string) error {
	if u != "" && u != defaultUser && u != "root" {
		return errdefs.Unauthenticated("user %q does not exist in the sandbox: berth's E2B API serves %q and root", u, defaultUser)
	}
	return nil
}

// readFiles is GET /files?path=: the file's bytes, gzip when asked.
func (h *Handler) readFiles(w http.ResponseWriter, r *http.Request) {
	id := sandboxFrom(r.Context())
	q := r.URL.Query()
	if err := checkUser(q.Get("username")); err != nil {
		writeErr(w, err)
		return
	}
	p := resolvePathAs(q.Get("username"), q.Get("path"))
	ag, release, err := h.agent(r.Context(), id)
	if err != nil {
		writeFileErr(w, id, err)
		return
	}
	defer release()
	fi, err := ag.Stat(r.Context(), p)
	if err != nil {
		writeFileErr(w, id, err)
		return
	}
	if fi.Type == "dir" {
		writeErr(w, errdefs.InvalidArgument("path %s is a directory", p))
		return
	}
	rc, err := ag.ReadFile(r.Context(), p)
	if err != nil {
		writeFileErr(w, id, err)
		return
	}
	defer rc.Close()
	// The type from the name and the first bytes (internal/filetype, as
	// the native API); nosniff keeps browsers to it.
	br := bufio.NewReaderSize(rc, 64<<10)
	head, err := br.Peek(filetype.SniffLen)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		writeFileErr(w, id, err)
		return
	}
	mt, binary := filetype.Detect(p, head)
	w.Header().Set("Content-Type", mt)
	w.Header().Set(api.BinaryHeader, strconv.FormatBool(binary))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": fi.Name}))
	if wantsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if _, err := io.Copy(gz, br); err != nil {
			panic(http.ErrAbortHandler)
		}
		if err := gz.Close(); err != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	if _, err := io.Copy(w, br); err != nil {
		// A short body must not look complete.
		panic(http.ErrAbortHandler)
	}
}

// wantsGzip is the SDK's opt-in (read with gzip: true sends exactly
// "Accept-Encoding: gzip"). Encoding is optional for a server, and the
// default header of HTTP clients ("gzip, deflate, …") does not make every
// download pay for compression.
func wantsGzip(ae string) bool {
	return strings.EqualFold(strings.TrimSpace(ae), "gzip")
}

// writeFiles is POST /files: multipart (field "file", the filename is the
// target path when the query has none) or a raw octet-stream body, either
// optionally gzip-encoded.
func (h *Handler) writeFiles(w http.ResponseWriter, r *http.Request) {
	id := sandboxFrom(r.Context())
	q := r.URL.Query()
	if err := checkUser(q.Get("username")); err != nil {
		writeErr(w, err)
		return
	}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-metadata-") {
			writeErr(w, errdefs.InvalidArgument("file metadata (%s) is not supported by berth's envd yet", k))
			return
		}
	}
	ag, release, err := h.agent(r.Context(), id)
	if err != nil {
		writeFileErr(w, id, err)
		return
	}
	defer release()
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			writeErr(w, errdefs.InvalidArgument("gzip body: %w", err))
			return
		}
		defer gz.Close()
		body = gz
	}
	write := func(target string, src io.Reader) (fileEntry, error) {
		p := resolvePathAs(q.Get("username"), target)
		if err := ag.WriteFileAs(r.Context(), p, src, 0, q.Get("username")); err != nil {
			if errdefs.IsKind(err, errdefs.ErrNoSpace) { // ENOSPC or EDQUOT in the sandbox
				return fileEntry{}, errdefs.NoSpace("not enough disk space: %w", err)
			}
			return fileEntry{}, err
		}
		return fileEntry{Path: p, Name: baseName(p), Type: "file"}, nil
	}
	var out []fileEntry
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeErr(w, errdefs.InvalidArgument("multipart body: %w", err))
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			// Part.FileName keeps only the base name; the SDK sends the
			// whole target path there.
			_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			target := cd["filename"]
			if qp := q.Get("path"); qp != "" {
				target = qp
			}
			if target == "" {
				writeErr(w, errdefs.InvalidArgument("a file part has no path: pass ?path= or a filename"))
				return
			}
			e, err := write(target, part)
			part.Close()
			if err != nil {
				writeFileErr(w, id, err)
				return
			}
			out = append(out, e)
		}
	} else {
		if q.Get("path") == "" {
			writeErr(w, errdefs.InvalidArgument("path is required"))
			return
		}
		e, err := write(q.Get("path"), body)
		if err != nil {
			writeFileErr(w, id, err)
			return
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		writeErr(w, errdefs.InvalidArgument("no file in the request"))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 && i < len(p)-1 {
		return p[i+1:]
	}
	return p
}

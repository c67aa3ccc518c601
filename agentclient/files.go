package agentclient

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const maxInfoBody = 1 << 20

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// FileOptions scope the file calls made with a context from
// WithFileOptions. They travel in the context so that the layers between
// an API request and the agent (the controller's file methods) pass them on
// untouched.
type FileOptions struct {
	// User acts: relative paths start in that user's home, and files and
	// directories the call creates belong to that user. A write with a
	// User also sets the owner of a new file (an existing file keeps its
	// owner).
	User string
	// Session: relative paths start in that session's current working
	// directory, and its user acts unless User is set.
	Session string
	// HideDotFiles leaves dot files (and, recursively, dot directories'
	// contents) out of ListFiles.
	HideDotFiles bool
	// RemoveType "file" makes Remove refuse a directory, "dir" refuse
	// anything else; "" removes either.
	RemoveType string
}

type fileOptionsKey struct{}

// WithFileOptions returns ctx carrying o for the file calls made with it.
func WithFileOptions(ctx context.Context, o FileOptions) context.Context {
	return context.WithValue(ctx, fileOptionsKey{}, o)
}

// FileOptionsFrom returns the options WithFileOptions put in ctx.
func FileOptionsFrom(ctx context.Context) FileOptions {
	o, _ := ctx.Value(fileOptionsKey{}).(FileOptions)
	return o
}

// scoped adds the context's user and session to q.
func scoped(ctx context.Context, q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	o := FileOptionsFrom(ctx)
	if o.User != "" && q.Get("user") == "" {
		q.Set("user", o.User)
	}
	if o.Session != "" {
		q.Set("session", o.Session)
	}
	return q
}

// ReadFile streams a file from the sandbox. The body is not size-capped (the
// caller asked for the file); a transfer cut short reads as
// io.ErrUnexpectedEOF, never as a clean end. The caller closes it.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint("/v1/files/content", scoped(ctx, pathQuery(path))), nil)
	if err != nil {
		return nil, errdefs.InvalidArgument("build request: %w", err)
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile streams r into path in the sandbox. A cut upload never touches
// the path (the agent stages the body first); an existing file is
// overwritten in place and keeps its inode, owner and mode unless mode is
// set. mode 0 means 0644 for a new file, unchanged for an existing one. r
// is not closed.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode uint32) error {
	return c.WriteFileAs(ctx, path, r, mode, "")
}

// WriteFileAs is WriteFile with the file (and any directory it creates)
// owned by user instead of the sandbox's default user.
func (c *Client) WriteFileAs(ctx context.Context, path string, r io.Reader, mode uint32, user string) error {
	if err := checkPath(path); err != nil {
		return err
	}
	q := pathQuery(path)
	if user != "" {
		q.Set("user", user)
	}
	q = scoped(ctx, q)
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	var body io.Reader
	switch r.(type) {
	case nil:
		body = http.NoBody
	case *bytes.Reader, *bytes.Buffer, *strings.Reader:
		body = r // the request gets a Content-Length
	default:
		// Hide any Close method: the transport closes request bodies,
		// and r belongs to the caller.
		body = struct{ io.Reader }{r}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, endpoint("/v1/files/content", q), body)
	if err != nil {
		return errdefs.InvalidArgument("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	return nil
}

// ListFiles lists a directory (its whole tree when recursive; symlinked
// directories are not followed).
func (c *Client) ListFiles(ctx context.Context, path string, recursive bool) ([]api.FileInfo, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	q := scoped(ctx, pathQuery(path))
	if recursive {
		q.Set("recursive", "1")
	}
	if FileOptionsFrom(ctx).HideDotFiles {
		q.Set("hidden", "0")
	}
	var list api.FileList
	if err := c.call(ctx, http.MethodGet, "/v1/files/list", q, nil, &list, maxJSONBody); err != nil {
		return nil, err
	}
	return list.Files, nil
}

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string) (api.FileInfo, error) {
	if err := checkPath(path); err != nil {
		return api.FileInfo{}, err
	}
	var fi api.FileInfo
	err := c.call(ctx, http.MethodGet, "/v1/files/stat", scoped(ctx, pathQuery(path)), nil, &fi, maxInfoBody)
	return fi, err
}

// Exists reports whether path exists (a dangling symlink exists).
func (c *Client) Exists(ctx context.Context, path string) (bool, error) {
	if err := checkPath(path); err != nil {
		return false, err
	}
	var ex api.ExistsResponse
	err := c.call(ctx, http.MethodGet, "/v1/files/exists", scoped(ctx, pathQuery(path)), nil, &ex, maxErrorBody)
	return ex.Exists, err
}

// Mkdir is mkdir -p; new directories belong to the sandbox's default user.
func (c *Client) Mkdir(ctx context.Context, req api.MkdirRequest) error {
	if err := checkPath(req.Path); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/files/mkdir", scoped(ctx, nil), req, nil, 0)
}

// Remove deletes path; a non-empty directory needs recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	if err := checkPath(path); err != nil {
		return err
	}
	q := scoped(ctx, pathQuery(path))
	if recursive {
		q.Set("recursive", "1")
	}
	if t := FileOptionsFrom(ctx).RemoveType; t != "" {
		q.Set("type", t)
	}
	return c.call(ctx, http.MethodDelete, "/v1/files", q, nil, nil, 0)
}

// Rename moves a file or directory inside the sandbox.
func (c *Client) Rename(ctx context.Context, req api.RenameRequest) error {
	if err := checkPath(req.From); err != nil {
		return err
	}
	if err := checkPath(req.To); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/files/rename", scoped(ctx, nil), req, nil, 0)
}

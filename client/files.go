package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-sh/berth/api"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func pathQuery(path string, recursive bool) url.Values {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return q
}

// FileOptions scope the file calls (and watches) made with a context from
// WithFileOptions.
type FileOptions struct {
	// User acts: relative paths start in that user's home (root's is
	// /root), and what the call creates belongs to that user.
	User string
	// Session: relative paths start in that session's working directory.
	Session string
	// HideDotFiles leaves dot files out of ListFiles (and, when
	// recursive, everything below a dot directory).
	HideDotFiles bool
	// FilesOnly makes Remove refuse a directory, even an empty one.
	FilesOnly bool
}

type fileOptionsKey struct{}

// WithFileOptions returns ctx carrying o for this package's file calls.
func WithFileOptions(ctx context.Context, o FileOptions) context.Context {
	return context.WithValue(ctx, fileOptionsKey{}, o)
}

// fileQuery is pathQuery with the context's FileOptions.
func fileQuery(ctx context.Context, path string, recursive bool) url.Values {
	q := pathQuery(path, recursive)
	o, _ := ctx.Value(fileOptionsKey{}).(FileOptions)
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.Session != "" {
		q.Set("session", o.Session)
	}
	return q
}

// ReadFile opens a file in the sandbox for streaming download. The caller
// must close it. If the download breaks midway, Read returns an error
// rather than a clean EOF.
func (c *Client) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	res, err := c.do(ctx, request{
		method: http.MethodGet, path: sandboxPath(name, "files", "content"),
		query: fileQuery(ctx, path, false), accept: "application/octet-stream",
	})
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// WriteFile streams r into a file in the sandbox. A new file gets
// permission bits mode (0 means 0644); an existing one is overwritten in
// place and keeps its inode, owner and mode unless mode is not 0. A cut
// upload leaves the path untouched. There is no size limit other than the
// sandbox's disk.
func (c *Client) WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
	q := fileQuery(ctx, path, false)
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode&0o7777), 8))
	}
	res, err := c.do(ctx, request{
		method: http.MethodPut, path: sandboxPath(name, "files", "content"),
		query: q, body: r, contentType: "application/octet-stream",
	})
	if err != nil {
		return err
	}
	closeBody(res.Body)
	return nil
}

// ListFiles lists a directory, or a whole tree with recursive.
func (c *Client) ListFiles(ctx context.Context, name, path string, recursive bool) ([]api.FileInfo, error) {
	var list api.FileList
	q := fileQuery(ctx, path, recursive)
	if o, _ := ctx.Value(fileOptionsKey{}).(FileOptions); o.HideDotFiles {
		q.Set("hidden", "false")
	}
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "files"), q, nil, &list)
	return list.Files, err
}

// Stat describes one file (symlinks are not followed).
func (c *Client) Stat(ctx context.Context, name, path string) (api.FileInfo, error) {
	var fi api.FileInfo
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "files", "stat"), fileQuery(ctx, path, false), nil, &fi)
	return fi, err
}

// Exists reports whether path exists in the sandbox.
func (c *Client) Exists(ctx context.Context, name, path string) (bool, error) {
	var ex api.ExistsResponse
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "files", "exists"), fileQuery(ctx, path, false), nil, &ex)
	return ex.Exists, err
}

// Mkdir creates a directory and its parents (mkdir -p).
func (c *Client) Mkdir(ctx context.Context, name string, req api.MkdirRequest) error {
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(name, "files", "mkdir"), scopeOnly(ctx), req, nil)
	return err
}

// Remove deletes a file, or a directory tree with recursive.
func (c *Client) Remove(ctx context.Context, name, path string, recursive bool) error {
	q := fileQuery(ctx, path, recursive)
	if o, _ := ctx.Value(fileOptionsKey{}).(FileOptions); o.FilesOnly {
		q.Set("type", "file")
	}
	_, err := c.doJSON(ctx, http.MethodDelete, sandboxPath(name, "files"), q, nil, nil)
	return err
}

// Rename moves a file or directory within the sandbox.
func (c *Client) Rename(ctx context.Context, name string, req api.RenameRequest) error {
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(name, "files", "rename"), scopeOnly(ctx), req, nil)
	return err
}

// scopeOnly is the context's user and session as a query (nil if none).
func scopeOnly(ctx context.Context) url.Values {
	q := fileQuery(ctx, "", false)
	q.Del("path")
	if len(q) == 0 {
		return nil
	}
	return q
}

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

// ReadFile opens a file in the sandbox for streaming download. The caller
// must close it. If the download breaks midway, Read returns an error
// rather than a clean EOF.
func (c *Client) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	res, err := c.do(ctx, request{
		method: http.MethodGet, path: sandboxPath(name, "files", "content"),
		query: pathQuery(path, false), accept: "application/octet-stream",
	})
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// WriteFile streams r into a file in the sandbox, creating or replacing it
// with permission bits mode (0 means 0644). There is no size limit other
// than the sandbox's disk.
func (c *Client) WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
	q := pathQuery(path, false)
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
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "files"), pathQuery(path, recursive), nil, &list)
	return list.Files, err
}

// Stat describes one file (symlinks are not followed).
func (c *Client) Stat(ctx context.Context, name, path string) (api.FileInfo, error) {
	var fi api.FileInfo
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "files", "stat"), pathQuery(path, false), nil, &fi)
	return fi, err
}

// Exists reports whether path exists in the sandbox.
func (c *Client) Exists(ctx context.Context, name, path string) (bool, error) {
	var ex api.ExistsResponse
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(name, "files", "exists"), pathQuery(path, false), nil, &ex)
	return ex.Exists, err
}

// Mkdir creates a directory and its parents (mkdir -p).
func (c *Client) Mkdir(ctx context.Context, name string, req api.MkdirRequest) error {
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(name, "files", "mkdir"), nil, req, nil)
	return err
}

// Remove deletes a file, or a directory tree with recursive.
func (c *Client) Remove(ctx context.Context, name, path string, recursive bool) error {
	_, err := c.doJSON(ctx, http.MethodDelete, sandboxPath(name, "files"), pathQuery(path, recursive), nil, nil)
	return err
}

// Rename moves a file or directory within the sandbox.
func (c *Client) Rename(ctx context.Context, name string, req api.RenameRequest) error {
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(name, "files", "rename"), nil, req, nil)
	return err
}

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

// ReadFile streams a file from the sandbox. The body is not size-capped (the
// caller asked for the file); a transfer cut short reads as
// io.ErrUnexpectedEOF, never as a clean end. The caller closes it.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint("/v1/files/content", pathQuery(path)), nil)
	if err != nil {
		return nil, errdefs.InvalidArgument("build request: %v", err)
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile streams r into path in the sandbox, atomically (the agent writes
// a temp file and renames it). mode 0 means 0644. r is not closed.
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
		return errdefs.InvalidArgument("build request: %v", err)
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
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "1")
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
	err := c.call(ctx, http.MethodGet, "/v1/files/stat", pathQuery(path), nil, &fi, maxInfoBody)
	return fi, err
}

// Exists reports whether path exists (a dangling symlink exists).
func (c *Client) Exists(ctx context.Context, path string) (bool, error) {
	if err := checkPath(path); err != nil {
		return false, err
	}
	var ex api.ExistsResponse
	err := c.call(ctx, http.MethodGet, "/v1/files/exists", pathQuery(path), nil, &ex, maxErrorBody)
	return ex.Exists, err
}

// Mkdir is mkdir -p; new directories belong to the sandbox's default user.
func (c *Client) Mkdir(ctx context.Context, req api.MkdirRequest) error {
	if err := checkPath(req.Path); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/v1/files/mkdir", nil, req, nil, 0)
}

// Remove deletes path; a non-empty directory needs recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	if err := checkPath(path); err != nil {
		return err
	}
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "1")
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
	return c.call(ctx, http.MethodPost, "/v1/files/rename", nil, req, nil, 0)
}

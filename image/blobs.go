package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

func (s *Store) blobPath(digest string) string {
	return filepath.Join(s.root, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (s *Store) hasBlob(digest string) bool {
	_, err := os.Stat(s.blobPath(digest))
	return err == nil
}

// ctxReader stops a long copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeBlob stores r as a blob. If want is set the content must hash to it
// (a tampered or truncated download is rejected, never stored); the blob
// becomes visible only after a complete, verified, fsynced write (temp file
// + rename). onBytes, if set, sees the running byte count. It returns the
// digest and size.
func (s *Store) writeBlob(ctx context.Context, r io.Reader, want string, onBytes func(int64)) (string, int64, error) {
	if want != "" {
		if !digestRe.MatchString(want) {
			return "", 0, errdefs.InvalidArgument("unsupported digest %q (only sha256)", want)
		}
		if s.hasBlob(want) {
			return want, blobSize(s.blobPath(want)), nil
		}
	}
	f, err := os.CreateTemp(filepath.Join(s.root, "tmp"), "blob-")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	var w io.Writer = io.MultiWriter(f, h)
	if onBytes != nil {
		w = &countWriter{w: w, fn: onBytes}
	}
	n, err := io.CopyBuffer(w, ctxReader{ctx, r}, make([]byte, 256<<10))
	if err != nil {
		return "", 0, fmt.Errorf("write blob: %w", err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return "", 0, errdefs.InvalidArgument("blob digest mismatch: expected %s, got %s (corrupt or tampered content)", want, got)
	}
	if err := f.Sync(); err != nil {
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	if err := os.Chmod(f.Name(), 0o444); err != nil {
		return "", 0, err
	}
	if err := os.Rename(f.Name(), s.blobPath(got)); err != nil {
		return "", 0, err
	}
	return got, n, nil
}

func (s *Store) writeBlobBytes(ctx context.Context, b []byte, want string) (string, error) {
	d, _, err := s.writeBlob(ctx, strings.NewReader(string(b)), want, nil)
	return d, err
}

func (s *Store) readBlob(digest string, max int64) ([]byte, error) {
	f, err := os.Open(s.blobPath(digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("blob %s missing from the image store", digest)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errdefs.ResourceExhausted("blob %s is larger than %d bytes", digest, max)
	}
	return b, nil
}

func blobSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

type countWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.fn(c.n)
	return n, err
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

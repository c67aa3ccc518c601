package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/internal/check"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Put implements blob.Store; see the package comment for how each size
// class is made atomic.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, wantSHA256 string) (blob.Info, error) {
	if err := check.Key(key); err != nil {
		return blob.Info{}, err
	}
	if wantSHA256 != "" {
		if err := check.Digest(wantSHA256); err != nil {
			return blob.Info{}, err
		}
	}
	src := &srcReader{r: r}
	h := check.NewHasher(src)
	// Buffer the first part in a growing buffer, so a small blob costs
	// memory in proportion to its size, not a whole PartSize.
	var first bytes.Buffer
	_, err := io.CopyN(&first, h, s.cfg.PartSize)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return blob.Info{}, s.readErr(key, src, err)
	}
	buf := first.Bytes()
	if err != nil { // io.EOF: the whole blob fit in one part
		n := len(buf)
		info := blob.Info{Key: key, Size: h.N, SHA256: h.Sum()}
		if err := wantMatches(info, wantSHA256); err != nil {
			return blob.Info{}, err
		}
		if err := ctx.Err(); err != nil {
			return blob.Info{}, err
		}
		_, err := s.client.PutObject(ctx, s.cfg.Bucket, s.objectName(key), bytes.NewReader(buf[:n]), int64(n),
			minio.PutObjectOptions{UserMetadata: map[string]string{metaSHA: info.SHA256}, ContentType: "application/octet-stream", DisableMultipart: true})
		if err != nil {
			return blob.Info{}, s.mapErr(err, "put blob %s", key)
		}
		return info, nil
	}
	return s.putLarge(ctx, key, src, h, buf, wantSHA256)
}

// putLarge streams a blob bigger than one part; buf holds its first part.
func (s *Store) putLarge(ctx context.Context, key string, src *srcReader, h *check.Hasher, buf []byte, want string) (blob.Info, error) {
	target, meta := s.tempName(), map[string]string(nil)
	if want != "" {
		// The digest is known up front, so the upload can carry it and
		// target the final name; Complete is withheld unless it matches.
		target, meta = s.objectName(key), map[string]string{metaSHA: want}
	}
	uploadID, err := s.core.NewMultipartUpload(ctx, s.cfg.Bucket, target, minio.PutObjectOptions{UserMetadata: meta, ContentType: "application/octet-stream"})
	if err != nil {
		return blob.Info{}, s.mapErr(err, "put blob %s: starting upload", key)
	}
	completed := false
	defer func() {
		if !completed {
			cctx, cancel := cleanupCtx(ctx)
			defer cancel()
			s.core.AbortMultipartUpload(cctx, s.cfg.Bucket, target, uploadID)
		}
	}()

	var parts []minio.CompletePart
	n := len(buf)
	for {
		if n > 0 {
			// bytes.Reader is seekable, which is what lets minio-go retry
			// a part after a 5xx or a dropped connection.
			p, err := s.core.PutObjectPart(ctx, s.cfg.Bucket, target, uploadID, len(parts)+1, bytes.NewReader(buf[:n]), int64(n), minio.PutObjectPartOptions{})
			if err != nil {
				return blob.Info{}, s.mapErr(err, "put blob %s: uploading part %d", key, len(parts)+1)
			}
			parts = append(parts, minio.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag})
		}
		var err error
		n, err = readPart(ctx, h, buf)
		if errors.Is(err, io.EOF) {
			if n > 0 {
				continue // upload the tail, then the next read ends the loop with n == 0
			}
			break
		}
		if err != nil {
			return blob.Info{}, s.readErr(key, src, err)
		}
	}
	info := blob.Info{Key: key, Size: h.N, SHA256: h.Sum()}
	if err := wantMatches(info, want); err != nil {
		return blob.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	up, err := s.core.CompleteMultipartUpload(ctx, s.cfg.Bucket, target, uploadID, parts, minio.PutObjectOptions{})
	if err != nil {
		return blob.Info{}, s.mapErr(err, "put blob %s: completing upload", key)
	}
	completed = true
	if want != "" {
		return info, nil
	}
	defer func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		s.client.RemoveObject(cctx, s.cfg.Bucket, target, minio.RemoveObjectOptions{})
	}()
	dst := minio.CopyDestOptions{
		Bucket: s.cfg.Bucket, Object: s.objectName(key),
		UserMetadata: map[string]string{metaSHA: info.SHA256}, ReplaceMetadata: true,
	}
	srcOpt := minio.CopySrcOptions{Bucket: s.cfg.Bucket, Object: target, MatchETag: up.ETag}
	if info.Size <= maxPartSize {
		_, err = s.client.CopyObject(ctx, dst, srcOpt)
	} else {
		_, err = s.client.ComposeObject(ctx, dst, srcOpt)
	}
	if err != nil {
		return blob.Info{}, s.mapErr(err, "put blob %s: copying into place", key)
	}
	return info, nil
}

// readPart fills buf from r. It returns io.EOF (with the bytes read) when
// r ended, nil when buf is full.
func readPart(ctx context.Context, r io.Reader, buf []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n, err := io.ReadFull(r, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	if err == nil || errors.Is(err, io.EOF) {
		if cerr := ctx.Err(); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

func wantMatches(info blob.Info, want string) error {
	if want != "" && info.SHA256 != want {
		return errdefs.InvalidArgument("put blob %s: content sha256 is %s, want %s; nothing was stored", info.Key, info.SHA256, want)
	}
	return nil
}

func (s *Store) readErr(key string, src *srcReader, err error) error {
	if src.err != nil && errors.Is(err, src.err) {
		return fmt.Errorf("put blob %s: reading content: %w", key, err)
	}
	return fmt.Errorf("put blob %s: %w", key, err)
}

func (s *Store) tempName() string {
	var b [16]byte
	rand.Read(b[:])
	return s.cfg.Prefix + tmpDir + hex.EncodeToString(b[:])
}

// cleanupCtx outlives a cancelled caller: aborting an upload is exactly
// what must still happen after the caller gave up.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// srcReader remembers the caller's read error so Put can tell "your
// reader failed" from "S3 failed".
type srcReader struct {
	r   io.Reader
	err error
}

func (s *srcReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

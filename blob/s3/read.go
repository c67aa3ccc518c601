package s3

import (
	"context"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/internal/check"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Get implements blob.Store: one GET, whose body is verified as it streams.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := check.Key(key); err != nil {
		return nil, blob.Info{}, err
	}
	body, oi, hdr, err := s.core.GetObject(ctx, s.cfg.Bucket, s.objectName(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, blob.Info{}, s.notFound(err, key, "get")
	}
	info := blob.Info{Key: key, Size: oi.Size, SHA256: hdr.Get(hdrSHA)}
	if err := check.Digest(info.SHA256); err != nil {
		body.Close()
		return nil, blob.Info{}, check.Corrupt(key, "object has no valid berth sha256 metadata")
	}
	return check.NewReader(&bodyReader{s: s, key: key, rc: body}, key, info.Size, info.SHA256), info, nil
}

// Stat implements blob.Store with one HEAD.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := check.Key(key); err != nil {
		return blob.Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, s.objectName(key), minio.StatObjectOptions{})
	if err != nil {
		return blob.Info{}, s.notFound(err, key, "stat")
	}
	info := blob.Info{Key: key, Size: oi.Size, SHA256: oi.Metadata.Get(hdrSHA)}
	if check.Digest(info.SHA256) != nil {
		return blob.Info{}, check.Corrupt(key, "object has no valid berth sha256 metadata")
	}
	return info, nil
}

func (s *Store) notFound(err error, key, op string) error {
	err = s.mapErr(err, "%s blob %s", op, key)
	if errdefs.IsKind(err, errdefs.ErrNotFound) {
		return errdefs.NotFound("blob %s not found", key)
	}
	return err
}

// Delete implements blob.Store. S3 DELETE of a missing key succeeds.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := check.Key(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.objectName(key), minio.RemoveObjectOptions{})
	if err = s.mapErr(err, "delete blob %s", key); err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// List implements blob.Store. S3 listings carry no user metadata, so each
// entry costs a HEAD; they run a few at a time.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := check.Prefix(prefix); err != nil {
		return nil, err
	}
	var keys []string
	for obj := range s.client.ListObjectsIter(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.mapErr(obj.Err, "list blobs %q", prefix)
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, s.cfg.Prefix), suffix)
		// Temp objects and anything not written by this store are skipped.
		if !ok || check.Key(name) != nil || !strings.HasPrefix(name, prefix) {
			continue
		}
		keys = append(keys, name)
	}
	infos := make([]blob.Info, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			infos[i], errs[i] = s.Stat(ctx, k)
		}()
	}
	wg.Wait()
	out := infos[:0]
	for i, in := range infos {
		switch {
		case errs[i] == nil:
			out = append(out, in)
		case errdefs.IsKind(errs[i], errdefs.ErrNotFound):
			// deleted between the listing and the HEAD
		default:
			return nil, errs[i]
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// bodyReader maps network failures mid-download to Unavailable.
type bodyReader struct {
	s   *Store
	key string
	rc  io.ReadCloser
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		err = b.s.mapErr(err, "reading blob %s", b.key)
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.rc.Close() }

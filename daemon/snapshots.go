package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/fs"
	"github.com/berth-sh/berth/blob/s3"
	"github.com/berth-sh/berth/node/local"
	"github.com/berth-sh/berth/snapshot"
)

// openBlobs opens the configured blob store.
func openBlobs(ctx context.Context, cfg Config) (blob.Store, string, error) {
	b := cfg.Blobs
	if b.S3Endpoint == "" {
		dir := filepath.Join(cfg.DataDir, "blobs")
		st, err := fs.New(dir)
		if err != nil {
			return nil, "", fmt.Errorf("blob store %s: %w", dir, err)
		}
		return st, "local " + dir, nil
	}
	if b.S3AccessKey == "" {
		b.S3AccessKey = os.Getenv("BERTH_S3_ACCESS_KEY")
	}
	if b.S3SecretKey == "" {
		b.S3SecretKey = os.Getenv("BERTH_S3_SECRET_KEY")
	}
	st, err := s3.New(ctx, s3.Config{Endpoint: b.S3Endpoint, Bucket: b.S3Bucket, Region: b.S3Region,
		Prefix: b.S3Prefix, AccessKey: b.S3AccessKey, SecretKey: b.S3SecretKey})
	if err != nil {
		return nil, "", fmt.Errorf("S3 blob store %s/%s: %w", b.S3Endpoint, b.S3Bucket, err)
	}
	return st, "s3 " + b.S3Endpoint + "/" + b.S3Bucket, nil
}

// layers adapts the snapshot package to local.Snapshotter.
type layers struct{ cache *snapshot.Cache }

func (l layers) Capture(ctx context.Context, upper string, w io.Writer) (local.CaptureStats, error) {
	st, err := snapshot.Capture(ctx, upper, w, snapshot.CaptureOptions{})
	return local.CaptureStats{Files: st.Files, UncompressedBytes: st.UncompressedBytes, CompressedBytes: st.CompressedBytes, SHA256: st.SHA256}, err
}

// CapturePrimed implements local.LayerPrimer: the capture's tar also
// feeds the cache's image builder.
func (l layers) CapturePrimed(ctx context.Context, upper string, w io.Writer) (local.CaptureStats, func(id, sum string) error, func(), error) {
	p, err := l.cache.Prime(context.WithoutCancel(ctx))
	if err != nil || p == nil {
		st, err := l.Capture(ctx, upper, w)
		return st, func(string, string) error { return nil }, func() {}, err
	}
	st, err := snapshot.Capture(ctx, upper, w, snapshot.CaptureOptions{Tee: p})
	if err != nil {
		p.Abort()
		return local.CaptureStats{}, nil, nil, err
	}
	return local.CaptureStats{Files: st.Files, UncompressedBytes: st.UncompressedBytes, CompressedBytes: st.CompressedBytes, SHA256: st.SHA256},
		p.Commit, p.Abort, nil
}

func (l layers) Squash(ctx context.Context, dirs []string, w io.Writer) (local.CaptureStats, error) {
	st, err := snapshot.Squash(ctx, dirs, w, snapshot.CaptureOptions{})
	return local.CaptureStats{Files: st.Files, UncompressedBytes: st.UncompressedBytes, CompressedBytes: st.CompressedBytes, SHA256: st.SHA256}, err
}

func (l layers) Layer(ctx context.Context, id, sum string, open func(ctx context.Context) (io.ReadCloser, error)) (string, error) {
	return l.cache.Layer(ctx, id, sum, open)
}

func (l layers) Forget(id string) error { return l.cache.Remove(id) }

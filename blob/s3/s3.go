package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/internal/check"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	suffix  = ".blob~"
	tmpDir  = "~tmp/"
	metaSHA = "berth-sha256" // sent as x-amz-meta-berth-sha256
	hdrSHA  = "X-Amz-Meta-Berth-Sha256"

	maxObjectName = 1024
	minPartSize   = 5 << 20 // S3's minimum for every part but the last
	maxPartSize   = 5 << 30 // and maximum per part / per single CopyObject
)

// Config configures a Store. Zero values get the defaults noted.
type Config struct {
	// Endpoint is host:port, or a URL whose scheme sets UseTLS.
	Endpoint string
	// Region defaults to us-east-1.
	Region string
	Bucket string
	// AccessKey and SecretKey are static credentials.
	AccessKey, SecretKey string
	// Prefix is prepended to every object name ("berth/" shares a bucket
	// with other users). Must be empty or end in "/".
	Prefix string
	UseTLS bool
	// PartSize is the multipart part size and the largest blob sent in a
	// single PUT. Default 16 MiB; at least 5 MiB. Each Put in flight holds
	// one buffer of this size.
	PartSize int64
	// MaxRetries is the number of attempts per request (minio-go retries
	// 5xx, throttling and network errors with backoff from 200ms capped at
	// 1s). Default 5, which bounds a dead endpoint to a few seconds plus
	// DialTimeout per attempt.
	MaxRetries int
	// DialTimeout bounds each TCP connect. Default 3s.
	DialTimeout time.Duration
	// ResponseTimeout bounds the wait for response headers after a request
	// is sent. Default 5m: a server-side copy of a large blob may take that
	// long before the server answers.
	ResponseTimeout time.Duration
	// TempMaxAge: temp objects and incomplete multipart uploads under
	// Prefix older than this are removed by New. Default 6h, far beyond
	// any single upload; several nodes may share a bucket, so a young temp
	// object may be another node's upload in flight.
	TempMaxAge time.Duration
}

// Store is a blob.Store on an S3 bucket.
type Store struct {
	cfg    Config
	client *minio.Client
	core   minio.Core
	desc   string // "s3://bucket/prefix" for messages
}

var _ blob.Store = (*Store)(nil)

// New connects to the bucket and checks it exists (so a wrong endpoint,
// credential or bucket fails at startup, not at the first snapshot), then
// sweeps stale temp objects.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = 16 << 20
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 5
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	if cfg.ResponseTimeout <= 0 {
		cfg.ResponseTimeout = 5 * time.Minute
	}
	if cfg.TempMaxAge <= 0 {
		cfg.TempMaxAge = 6 * time.Hour
	}
	if cfg.PartSize < minPartSize || cfg.PartSize > maxPartSize {
		return nil, errdefs.InvalidArgument("s3 part size %d is outside S3's limits [5 MiB, 5 GiB]", cfg.PartSize)
	}
	if cfg.Bucket == "" {
		return nil, errdefs.InvalidArgument("s3 bucket is not set")
	}
	if cfg.Prefix != "" && (!strings.HasSuffix(cfg.Prefix, "/") || check.Prefix(cfg.Prefix) != nil) {
		return nil, errdefs.InvalidArgument("s3 prefix %q must be key characters ending in \"/\"", cfg.Prefix)
	}
	// S3 object names are at most 1024 bytes: the prefix must leave room
	// for the longest key plus the suffix.
	if max := maxObjectName - check.MaxKeyLen - len(suffix); len(cfg.Prefix) > max {
		return nil, errdefs.InvalidArgument("s3 prefix %q is longer than %d bytes", cfg.Prefix, max)
	}
	host := cfg.Endpoint
	if strings.Contains(host, "://") {
		u, err := url.Parse(host)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, errdefs.InvalidArgument("s3 endpoint %q is not host:port or scheme://host:port", cfg.Endpoint)
		}
		host, cfg.UseTLS = u.Host, u.Scheme == "https"
	}
	if host == "" {
		return nil, errdefs.InvalidArgument("s3 endpoint is not set")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = cfg.ResponseTimeout
	tr.MaxIdleConnsPerHost = 32
	// Bodies are already-compressed layers; transparent gzip would only
	// cost CPU and hide the real Content-Length.
	tr.DisableCompression = true
	client, err := minio.New(host, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     cfg.UseTLS,
		Region:     cfg.Region,
		Transport:  tr,
		MaxRetries: cfg.MaxRetries,
	})
	if err != nil {
		return nil, errdefs.InvalidArgument("s3 endpoint %q: %w", cfg.Endpoint, err)
	}
	s := &Store{cfg: cfg, client: client, core: minio.Core{Client: client}, desc: "s3://" + cfg.Bucket + "/" + cfg.Prefix}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, s.mapErr(err, "checking bucket %s", cfg.Bucket)
	}
	if !ok {
		return nil, errdefs.FailedPrecondition("s3 bucket %q does not exist at %s", cfg.Bucket, cfg.Endpoint)
	}
	s.sweep(ctx)
	return s, nil
}

func (s *Store) objectName(key string) string { return s.cfg.Prefix + key + suffix }

// sweep removes debris of crashed writers: temp objects and incomplete
// multipart uploads (which S3 bills for and never expires by default).
// Best effort: a failure here must not stop the daemon.
func (s *Store) sweep(ctx context.Context) {
	cutoff := time.Now().Add(-s.cfg.TempMaxAge)
	for obj := range s.client.ListObjectsIter(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix + tmpDir, Recursive: true}) {
		if obj.Err != nil {
			break
		}
		if obj.LastModified.Before(cutoff) {
			s.client.RemoveObject(ctx, s.cfg.Bucket, obj.Key, minio.RemoveObjectOptions{})
		}
	}
	for up := range s.client.ListIncompleteUploads(ctx, s.cfg.Bucket, s.cfg.Prefix, true) {
		if up.Err != nil {
			continue // drain the channel so its goroutine ends
		}
		if up.Initiated.Before(cutoff) && strings.HasPrefix(up.Key, s.cfg.Prefix) {
			s.core.AbortMultipartUpload(ctx, s.cfg.Bucket, up.Key, up.UploadID)
		}
	}
}

// mapErr turns a minio/net error into an errdefs kind with a message that
// names the store and the operation.
func (s *Store) mapErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s in %s: %w", what, s.desc, err)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) && er.Code != "" {
		switch er.Code {
		case "NoSuchKey", "NotFound":
			return errdefs.NotFound("%s: not found in %s", what, s.desc)
		case "NoSuchBucket":
			return errdefs.FailedPrecondition("%s: bucket %q does not exist", what, s.cfg.Bucket)
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
			return errdefs.Unauthenticated("%s: s3 rejected the credentials: %s", what, er.Error())
		case "AccessDenied", "AllAccessDisabled":
			return errdefs.PermissionDenied("%s: s3 denied access: %s", what, er.Error())
		case "EntityTooLarge", "XMinioStorageFull", "QuotaExceeded", "StorageFull":
			return errdefs.ResourceExhausted("%s: blob store %s is full or over quota: %s", what, s.desc, er.Error())
		case "InvalidArgument", "InvalidRequest", "InvalidBucketName", "KeyTooLongError", "InvalidPart", "EntityTooSmall":
			return errdefs.InvalidArgument("%s: %s", what, er.Error())
		case "PreconditionFailed":
			return errdefs.FailedPrecondition("%s: changed concurrently: %s", what, er.Error())
		}
		if er.StatusCode >= 500 || er.StatusCode == http.StatusTooManyRequests {
			return errdefs.Unavailable("%s: blob store %s failing after %d attempts: %s (%s)", what, s.desc, s.cfg.MaxRetries, er.Error(), er.Code)
		}
		return errdefs.Internal("%s: s3 error %s: %s", what, er.Code, er.Error())
	}
	if isNetErr(err) {
		return errdefs.Unavailable("blob store unreachable: %s at %s: %w", what, s.cfg.Endpoint, err)
	}
	return errdefs.Internal("%s in %s: %w", what, s.desc, err)
}

func isNetErr(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		minioOffline(err)
}

// minioOffline is minio-go's health check refusing a call ("<endpoint> is
// offline."). minio-go makes that error with errors.New and exports no
// value or type for it, so its text is the only thing to test. Kept in
// this one function so that it is easy to drop when minio-go exports one.
func minioOffline(err error) bool {
	return strings.Contains(err.Error(), " is offline")
}

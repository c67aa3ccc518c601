package s3test

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Server is the test S3 server, from the variables that
// `scripts/s3-server.sh env` prints.
type Server struct {
	Endpoint             string // http://host:port
	Bucket               string
	AccessKey, SecretKey string
}

// Require returns the test server's settings, or skips t when they are
// not set.
func Require(t testing.TB) Server {
	t.Helper()
	s := Server{
		Endpoint:  os.Getenv("BERTH_TEST_S3_ENDPOINT"),
		Bucket:    os.Getenv("BERTH_TEST_S3_BUCKET"),
		AccessKey: os.Getenv("BERTH_TEST_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("BERTH_TEST_S3_SECRET_KEY"),
	}
	if s.Endpoint == "" {
		t.Skip("BERTH_TEST_S3_ENDPOINT is not set; start a real S3 server with scripts/s3-server.sh start and export the lines of scripts/s3-server.sh env")
	}
	if s.Bucket == "" {
		s.Bucket = "berth-test"
	}
	return s
}

// Client talks to the server directly, bypassing berth's store: the
// test's view of what is really in the bucket.
func (s Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Secure: u.Scheme == "https", Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// EnsureBucket creates the bucket if it is missing (tests running side by
// side may race to create it).
func (s Server) EnsureBucket(t testing.TB) {
	t.Helper()
	c := s.Client(t)
	ctx := context.Background()
	ok, err := c.BucketExists(ctx, s.Bucket)
	if err != nil {
		t.Fatalf("S3 server at %s: %v", s.Endpoint, err)
	}
	if ok {
		return
	}
	if err := c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}); err != nil {
		if code := minio.ToErrorResponse(err).Code; code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			t.Fatalf("creating bucket %s: %v", s.Bucket, err)
		}
	}
}

// RemovePrefix deletes every object and aborts every incomplete upload
// under prefix (a test's cleanup).
func (s Server) RemovePrefix(t testing.TB, prefix string) {
	t.Helper()
	c := s.Client(t)
	ctx := context.Background()
	for obj := range c.ListObjectsIter(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err == nil {
			c.RemoveObject(ctx, s.Bucket, obj.Key, minio.RemoveObjectOptions{})
		}
	}
	core := minio.Core{Client: c}
	for up := range c.ListIncompleteUploads(ctx, s.Bucket, prefix, true) {
		if up.Err == nil {
			core.AbortMultipartUpload(ctx, s.Bucket, up.Key, up.UploadID)
		}
	}
}

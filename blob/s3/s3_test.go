package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/blobtest"
	"github.com/berth-sh/berth/blob/s3/s3test"
	"github.com/berth-sh/berth/internal/errdefs"
)

// testConfig reads the real S3 server from the environment that
// scripts/s3-server.sh env prints, and gives each caller its own prefix
// in the shared bucket (removed at cleanup).
func testConfig(t *testing.T) Config {
	t.Helper()
	srv := s3test.Require(t)
	srv.EnsureBucket(t)
	cfg := Config{
		Endpoint:  srv.Endpoint,
		Bucket:    srv.Bucket,
		AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey,
		Prefix:    "t-" + randHex(6) + "/",
		PartSize:  minPartSize, // small parts: the suite's 24 and 64 MiB blobs go multipart
	}
	t.Cleanup(func() { srv.RemovePrefix(t, cfg.Prefix) })
	return cfg
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// rawClient talks to the server directly, bypassing the Store: the tests'
// view of what is really in the bucket.
func rawClient(t *testing.T, cfg Config) *minio.Client {
	t.Helper()
	return s3test.Server{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey}.Client(t)
}

func rawNames(t *testing.T, raw *minio.Client, cfg Config) []string {
	t.Helper()
	var out []string
	for obj := range raw.ListObjectsIter(context.Background(), cfg.Bucket, minio.ListObjectsOptions{Prefix: cfg.Prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		out = append(out, strings.TrimPrefix(obj.Key, cfg.Prefix))
	}
	return out
}

func newStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	s3test.Require(t)
	blobtest.Run(t, func(t *testing.T) (blob.Store, blobtest.Tamperer) {
		cfg := testConfig(t)
		s := newStore(t, cfg)
		raw := rawClient(t, cfg)
		return s, func(t *testing.T, key string) {
			ctx := context.Background()
			name := s.objectName(key)
			oi, err := raw.StatObject(ctx, cfg.Bucket, name, minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj, err := raw.GetObject(ctx, cfg.Bucket, name, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(obj)
			obj.Close()
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0xff
			// Same size, same recorded digest, different bytes.
			_, err = raw.PutObject(ctx, cfg.Bucket, name, bytes.NewReader(b), int64(len(b)),
				minio.PutObjectOptions{UserMetadata: map[string]string{metaSHA: oi.Metadata.Get(hdrSHA)}})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestRetriesThrough503(t *testing.T) {
	cfg := testConfig(t)
	proxy := s3test.NewFaultProxy(t, cfg.Endpoint)
	real := cfg
	cfg.Endpoint = proxy.URL
	s := newStore(t, cfg)
	ctx := context.Background()

	cases := []struct {
		name string
		size int
	}{{"small", 1000}, {"multipart", 2*minPartSize + 123}}
	for _, c := range cases {
		data := bytes.Repeat([]byte{'r'}, c.size)
		proxy.Failed.Store(0)
		proxy.FailNext.Store(2)
		info, err := s.Put(ctx, "retry/"+c.name, bytes.NewReader(data), "")
		if err != nil {
			t.Fatalf("%s Put through two 503s: %v", c.name, err)
		}
		if got := proxy.Failed.Load(); got != 2 {
			t.Fatalf("%s: proxy injected %d failures, want 2 (the probe did not bite)", c.name, got)
		}
		// Read back from the real server, not through the proxy.
		direct := newStore(t, Config{Endpoint: real.Endpoint, Bucket: cfg.Bucket, AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Prefix: cfg.Prefix})
		rc, ginfo, err := direct.Get(ctx, "retry/"+c.name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) || ginfo != info {
			t.Fatalf("%s read back %d bytes, %v, %+v", c.name, len(got), err, ginfo)
		}
	}

	// Negative control: more 503s than MaxRetries fails, as Unavailable,
	// and leaves nothing visible.
	cfg.MaxRetries = 2
	s2 := newStore(t, cfg)
	proxy.FailNext.Store(1000)
	_, err := s2.Put(ctx, "retry/never", strings.NewReader("x"), "")
	proxy.FailNext.Store(0)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Put through endless 503s = %v, want unavailable", err)
	}
	if _, err := s.Stat(ctx, "retry/never"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("failed Put left an object: %v", err)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A dead endpoint is Unavailable, quickly: MaxRetries bounds the backoff.
// This needs no S3 server.
func TestUnreachable(t *testing.T) {
	const bound = 15 * time.Second // generous; the expected time is ~1s
	start := time.Now()
	_, err := New(context.Background(), Config{Endpoint: "http://" + closedPort(t), Bucket: "bkt", AccessKey: "a", SecretKey: "s", MaxRetries: 3})
	elapsed := time.Since(start)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "blob store unreachable") {
		t.Fatalf("New against a closed port = %v, want unavailable: blob store unreachable", err)
	}
	if elapsed > bound {
		t.Fatalf("New took %v to give up; MaxRetries should bound it", elapsed)
	}
	t.Logf("gave up after %v", elapsed)
}

// A store whose server goes away later reports Unavailable on every call.
func TestServerGoesAway(t *testing.T) {
	cfg := testConfig(t)
	proxy := s3test.NewFaultProxy(t, cfg.Endpoint)
	cfg.Endpoint, cfg.MaxRetries = proxy.URL, 2
	s := newStore(t, cfg)
	ctx := context.Background()
	if _, err := s.Put(ctx, "k", strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	proxy.Close()
	_, err := s.Put(ctx, "k2", strings.NewReader("x"), "")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Put = %v, want unavailable", err)
	}
	_, _, err = s.Get(ctx, "k")
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Get = %v, want unavailable", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("List = %v, want unavailable", err)
	}
}

// Debris of a crashed writer (a temp object, an incomplete multipart
// upload) is never listed, survives while young (it may be another node's
// upload in flight), and is swept by New once older than TempMaxAge.
func TestTempDebris(t *testing.T) {
	cfg := testConfig(t)
	raw := rawClient(t, cfg)
	ctx := context.Background()
	s := newStore(t, cfg)
	if _, err := s.Put(ctx, "real", strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	tmp := cfg.Prefix + tmpDir + "deadbeef"
	if _, err := raw.PutObject(ctx, cfg.Bucket, tmp, strings.NewReader("half"), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	core := minio.Core{Client: raw}
	if _, err := core.NewMultipartUpload(ctx, cfg.Bucket, cfg.Prefix+"torn"+suffix, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	countUploads := func() int {
		n := 0
		for up := range raw.ListIncompleteUploads(ctx, cfg.Bucket, cfg.Prefix, true) {
			if up.Err != nil {
				t.Fatal(up.Err)
			}
			n++
		}
		return n
	}
	list, err := s.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Key != "real" {
		t.Fatalf("List = %+v, %v; want only real", list, err)
	}
	// Young debris survives New (negative control for the sweep below).
	newStore(t, cfg)
	if names := rawNames(t, raw, cfg); len(names) != 2 || countUploads() != 1 {
		t.Fatalf("default New swept young debris: objects %v", names)
	}
	time.Sleep(1100 * time.Millisecond) // LastModified has 1s resolution
	cfg.TempMaxAge = time.Millisecond
	newStore(t, cfg)
	if names := rawNames(t, raw, cfg); len(names) != 1 || names[0] != "real"+suffix {
		t.Fatalf("after sweep: objects %v, want only real%s", names, suffix)
	}
	if n := countUploads(); n != 0 {
		t.Fatalf("after sweep: %d incomplete uploads remain", n)
	}
}

// Large uploads without a wanted digest pass through a temp object; none
// may remain after success or failure.
func TestNoTempLeftBehind(t *testing.T) {
	cfg := testConfig(t)
	raw := rawClient(t, cfg)
	s := newStore(t, cfg)
	ctx := context.Background()
	data := bytes.Repeat([]byte("L"), 2*minPartSize+1)
	if _, err := s.Put(ctx, "big", bytes.NewReader(data), ""); err != nil {
		t.Fatal(err)
	}
	if names := rawNames(t, raw, cfg); len(names) != 1 || names[0] != "big"+suffix {
		t.Fatalf("objects after large Put: %v", names)
	}
	oi, err := raw.StatObject(ctx, cfg.Bucket, cfg.Prefix+"big"+suffix, minio.StatObjectOptions{})
	if err != nil || oi.Metadata.Get(hdrSHA) == "" {
		t.Fatalf("final object lacks the sha256 metadata: %v %v", err, oi.Metadata)
	}
}

func TestConfigValidation(t *testing.T) {
	ctx := context.Background()
	for _, c := range []Config{
		{Endpoint: "127.0.0.1:1"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", PartSize: 1 << 20},
		{Endpoint: "127.0.0.1:1", Bucket: "b", Prefix: "no-slash"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", Prefix: "../x/"},
		{Endpoint: "http://h:1/path", Bucket: "b"},
		{Endpoint: "127.0.0.1:1", Bucket: "b", Prefix: strings.Repeat("p", 120) + "/"},
		{Bucket: "b"},
	} {
		if _, err := New(ctx, c); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want invalid argument", c, err)
		}
	}
}

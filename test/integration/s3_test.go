//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob/s3/s3test"
	"github.com/berth-sh/berth/internal/errdefs"
)

// faultProxy sits between the daemon and the real S3 server (versitygw,
// started by scripts/test.sh) and injects the faults of checklist #32:
// a run of 503s, an endpoint that is down, and object bodies corrupted in
// flight. It keeps the Host header, so SigV4 signatures stay valid.
type faultProxy struct {
	*httptest.Server
	failNext atomic.Int32 // answer this many requests with 503
	down     atomic.Bool  // answer every request with 503
	corrupt  atomic.Bool  // flip a byte in every blob body served
	requests atomic.Int64
	failed   atomic.Int64
	blobGets atomic.Int64
}

func newFaultProxy(t *testing.T, endpoint string) *faultProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodGet && strings.HasSuffix(resp.Request.URL.Path, ".blob~") && resp.StatusCode == http.StatusOK {
				fp.blobGets.Add(1)
				if fp.corrupt.Load() {
					resp.Body = &flipReader{r: resp.Body, at: 200}
				}
			}
			return nil
		},
	}
	fp.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fp.requests.Add(1)
		if fp.down.Load() || fp.failNext.Add(-1) >= 0 {
			fp.failed.Add(1)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected by the test</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	fp.failNext.Store(0)
	t.Cleanup(fp.Close)
	return fp
}

// flipReader flips one byte at offset at of the stream.
type flipReader struct {
	r   io.ReadCloser
	at  int64
	off int64
}

func (f *flipReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.at >= f.off && f.at < f.off+int64(n) {
		p[f.at-f.off] ^= 0x5a
	}
	f.off += int64(n)
	return n, err
}

func (f *flipReader) Close() error { return f.r.Close() }

// TestSnapshotsOnS3WithFaults runs a daemon whose blob store is the real S3
// server behind a fault-injecting proxy: snapshots survive a run of 503s
// (retries), fail cleanly while S3 is down (unavailable, nothing recorded,
// the sandbox not left frozen), and a blob corrupted in flight is refused
// on restore with no sandbox left behind; the intact blob then restores.
func TestSnapshotsOnS3WithFaults(t *testing.T) {
	srv := s3test.Require(t)
	srv.EnsureBucket(t)
	ctx := context.Background()
	px := newFaultProxy(t, srv.Endpoint)
	env := []string{"BERTH_S3_ACCESS_KEY=" + srv.AccessKey, "BERTH_S3_SECRET_KEY=" + srv.SecretKey}
	prefix := fmt.Sprintf("it%s-%d/", itID, time.Now().UnixNano())
	t.Cleanup(func() { srv.RemovePrefix(t, prefix) })
	var snaps []string
	t.Cleanup(func() {
		// Snapshots recorded against S3 go before the daemon returns to
		// its local blob store (sandboxes' own cleanups ran already).
		if d != nil {
			for _, id := range snaps {
				_ = d.c.DeleteSnapshot(ctx, id)
			}
			d.stop()
		}
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Fatal(err)
		}
	})
	d.stop()
	var err error
	if d, err = startDaemon(env, "--s3-endpoint", px.URL, "--s3-bucket", srv.Bucket, "--s3-prefix", prefix); err != nil {
		t.Fatal(err)
	}

	sandbox(t, api.CreateSandboxRequest{Name: "it-s3"})
	run(t, "it-s3", "echo one > /home/user/f")
	s1, err := d.c.Snapshot(ctx, "it-s3", api.SnapshotRequest{Name: "it-s3-one"})
	if err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, s1.ID)
	if px.requests.Load() == 0 {
		t.Fatal("the snapshot did not go through the S3 proxy")
	}

	// A run of 503s: retried with backoff, the snapshot succeeds.
	run(t, "it-s3", "echo two > /home/user/f")
	px.failNext.Store(3)
	t0 := time.Now()
	s2, err := d.c.Snapshot(ctx, "it-s3", api.SnapshotRequest{Name: "it-s3-two"})
	if err != nil {
		t.Fatalf("snapshot through three 503s: %v", err)
	}
	snaps = append(snaps, s2.ID)
	t.Logf("FIGURE snapshot through 3 injected 503s: %s (%d failed requests)", time.Since(t0).Round(time.Millisecond), px.failed.Load())
	if px.failed.Load() < 3 {
		t.Fatalf("only %d requests were failed; the faults were not exercised", px.failed.Load())
	}

	// S3 down: a clean unavailable error, nothing recorded, and the
	// sandbox runs on (its freeze was released).
	px.down.Store(true)
	t0 = time.Now()
	_, err = d.c.Snapshot(ctx, "it-s3", api.SnapshotRequest{Name: "it-s3-three"})
	t.Logf("FIGURE snapshot with S3 down fails after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("snapshot with S3 down: %v, want unavailable", err)
	}
	if l, err := d.c.ListSnapshots(ctx, "it-s3", ""); err != nil || len(l) != 2 {
		t.Fatalf("snapshots after a failed one: %+v %v, want the two good ones", l, err)
	}
	if r := run(t, "it-s3", "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("sandbox after a failed snapshot: %+v", r)
	}
	px.down.Store(false)

	// First restore on this host downloads from S3 and verifies it.
	gets := px.blobGets.Load()
	sandbox(t, api.CreateSandboxRequest{Name: "it-s3-r2", Snapshot: s2.ID})
	if r := run(t, "it-s3-r2", "cat /home/user/f"); r.Stdout != "two\n" {
		t.Fatalf("restored from S3: %q", r.Stdout)
	}
	if px.blobGets.Load() == gets {
		t.Fatal("the restore did not read the blob from S3")
	}

	// A blob corrupted in flight: refused, and no sandbox is left.
	px.corrupt.Store(true)
	_, _, err = d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-s3-bad", Snapshot: s1.ID})
	px.corrupt.Store(false)
	if err == nil {
		_ = d.c.Destroy(ctx, "it-s3-bad")
		t.Fatal("a sandbox started from a blob corrupted in flight")
	}
	t.Logf("corrupted blob refused: %v", err)
	if sb, err := d.c.Get(ctx, "it-s3-bad"); !errors.Is(err, errdefs.ErrNotFound) {
		_ = d.c.Destroy(ctx, "it-s3-bad")
		t.Fatalf("after a refused restore the sandbox is %+v (%v), want not found", sb, err)
	}
	// Control: the same snapshot restores once the bytes are intact.
	sandbox(t, api.CreateSandboxRequest{Name: "it-s3-r1", Snapshot: s1.ID})
	if r := run(t, "it-s3-r1", "cat /home/user/f"); r.Stdout != "one\n" {
		t.Fatalf("restored from S3: %q", r.Stdout)
	}
}

//go:build integration

package integration

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob/s3/s3test"
	"github.com/berth-sh/berth/internal/errdefs"
)

// TestImagesThroughS3 runs two nodes, one after the other, on one bucket of
// the real S3 server (behind a fault proxy): node A, the suite's daemon,
// imports an image, which publishes it; node B, a daemon with a data dir
// and run dir of its own and no images, starts a sandbox from that image
// by name: it fetches the image from S3, verified, and runs it. A fetch
// whose blobs are corrupted in flight is refused and leaves neither a
// sandbox nor an image (the good fetch after it is the control), and a
// second sandbox of the same image downloads nothing.
func TestImagesThroughS3(t *testing.T) {
	srv := s3test.Require(t)
	srv.EnsureBucket(t)
	ctx := context.Background()
	px := s3test.NewFaultProxy(t, srv.Endpoint)
	env := []string{"BERTH_S3_ACCESS_KEY=" + srv.AccessKey, "BERTH_S3_SECRET_KEY=" + srv.SecretKey}
	prefix := fmt.Sprintf("it%s-img-%d/", itID, time.Now().UnixNano())
	s3Flags := []string{"--s3-endpoint", px.URL, "--s3-bucket", srv.Bucket, "--s3-prefix", prefix}
	t.Cleanup(func() { srv.RemovePrefix(t, prefix) })

	base, err := baseImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	origData := dataDir
	t.Cleanup(func() {
		if d != nil {
			d.stop()
		}
		dataDir = origData
		var err error
		if d, err = startDaemon(nil); err != nil {
			t.Fatal(err)
		}
		_ = d.c.RemoveImage(ctx, "it-shared")
	})

	// Node A: import (the base image's blobs, as an OCI layout) publishes.
	d.stop()
	if d, err = startDaemon(env, s3Flags...); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeOCILayout(pw, filepath.Join(dataDir, "images"), base)) }()
	t0 := time.Now()
	img, err := d.c.ImportImage(ctx, "it-shared", pr, nil)
	if err != nil {
		t.Fatalf("import on node A: %v", err)
	}
	t.Logf("FIGURE import + publish of %s (%d MB compressed) on node A: %s", img.Digest, img.Size>>20, time.Since(t0).Round(time.Millisecond))
	if img.Digest != base {
		t.Fatalf("imported %s, want %s", img.Digest, base)
	}
	d.stop()
	d = nil

	// Node B: its own data and run dirs; its image store emptied each run.
	dataDir = origData + "-node2"
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dataDir, "images")); err != nil {
		t.Fatal(err)
	}
	if d, err = startDaemon(env, append([]string{"--data", dataDir, "--run-dir", itRunDir + "-node2", "--upper-size", "8589934592"}, s3Flags...)...); err != nil {
		t.Fatal(err)
	}
	if l, err := d.c.ListImages(ctx); err != nil || len(l) != 0 {
		t.Fatalf("node B's images at start: %+v %v", l, err)
	}

	px.Corrupt.Store(true)
	_, _, err = d.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: "it-share-bad", Image: "it-shared"})
	px.Corrupt.Store(false)
	if err == nil {
		_ = d.c.Destroy(ctx, "it-share-bad")
		t.Fatal("a sandbox started from an image corrupted in flight")
	}
	t.Logf("corrupted fetch refused: %v", err)
	if _, err := d.c.Get(ctx, "it-share-bad"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after a refused fetch the sandbox: %v, want not found", err)
	}
	if l, err := d.c.ListImages(ctx); err != nil || len(l) != 0 {
		t.Fatalf("after a refused fetch node B holds %+v %v", l, err)
	}

	gets := px.BlobGets.Load()
	t0 = time.Now()
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-share", Image: "it-shared"})
	t.Logf("FIGURE create on node B fetching %d MB from S3: %s", img.Size>>20, time.Since(t0).Round(time.Millisecond))
	if sb.ImageDigest != base {
		t.Fatalf("node B's sandbox runs %s, want %s", sb.ImageDigest, base)
	}
	if px.BlobGets.Load()-gets < 4 { // name, manifest, config, layer
		t.Fatalf("the fetch read %d blobs from S3", px.BlobGets.Load()-gets)
	}
	if r := run(t, "it-share", "grep -c '^ID=debian' /etc/os-release"); r.Stdout != "1\n" {
		t.Fatalf("sandbox on the fetched image: %+v", r)
	}
	if l, err := d.c.ListImages(ctx); err != nil || len(l) != 1 || l[0].Name != "it-shared" || l[0].Digest != base {
		t.Fatalf("node B's images after the fetch: %+v %v", l, err)
	}
	gets = px.BlobGets.Load()
	sandbox(t, api.CreateSandboxRequest{Name: "it-share-2", Image: "it-shared"})
	if n := px.BlobGets.Load() - gets; n != 0 {
		t.Fatalf("a second sandbox of a fetched image read %d blobs from S3", n)
	}
	for _, n := range []string{"it-share", "it-share-2"} {
		if err := d.c.Destroy(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
}

// baseImage is the manifest digest of the suite's debian-trixie.
func baseImage(ctx context.Context) (string, error) {
	l, err := d.c.ListImages(ctx)
	if err != nil {
		return "", err
	}
	for _, i := range l {
		if i.Name == "debian-trixie" {
			return i.Digest, nil
		}
	}
	return "", fmt.Errorf("no debian-trixie image")
}

// writeOCILayout streams the image digest of the image store at root to w
// as an OCI-layout tarball.
func writeOCILayout(w io.Writer, root, digest string) error {
	blob := func(d string) string { return filepath.Join(root, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")) }
	raw, err := os.ReadFile(blob(digest))
	if err != nil {
		return err
	}
	var m struct {
		MediaType string
		Config    struct{ Digest string }
		Layers    []struct{ Digest string }
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	if m.MediaType == "" {
		m.MediaType = "application/vnd.oci.image.manifest.v1+json"
	}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []map[string]any{
		{"mediaType": m.MediaType, "digest": digest, "size": len(raw)},
	}})
	tw := tar.NewWriter(w)
	small := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := small("index.json", index); err != nil {
		return err
	}
	blobs := []string{digest, m.Config.Digest}
	for _, l := range m.Layers {
		blobs = append(blobs, l.Digest)
	}
	for _, b := range blobs {
		f, err := os.Open(blob(b))
		if err != nil {
			return err
		}
		fi, _ := f.Stat()
		err = tw.WriteHeader(&tar.Header{Name: "blobs/sha256/" + strings.TrimPrefix(b, "sha256:"), Mode: 0o644, Size: fi.Size(), Typeflag: tar.TypeReg})
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

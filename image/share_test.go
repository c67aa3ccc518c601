package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/fs"
	"github.com/berth-sh/berth/blob/s3"
	"github.com/berth-sh/berth/blob/s3/s3test"
	"github.com/berth-sh/berth/internal/errdefs"
)

// countingBlobs wraps a real blob store and records what goes through it;
// delay, if set, slows every Put (to widen races with readers).
type countingBlobs struct {
	blob.Store
	delay time.Duration

	mu   sync.Mutex
	puts []string
	gets map[string]int
}

func (c *countingBlobs) Put(ctx context.Context, key string, r io.Reader, want string) (blob.Info, error) {
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	info, err := c.Store.Put(ctx, key, r, want)
	if err == nil {
		c.mu.Lock()
		c.puts = append(c.puts, key)
		c.mu.Unlock()
	}
	return info, err
}

func (c *countingBlobs) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	c.mu.Lock()
	if c.gets == nil {
		c.gets = map[string]int{}
	}
	c.gets[key]++
	c.mu.Unlock()
	return c.Store.Get(ctx, key)
}

func (c *countingBlobs) snapshot() (puts []string, gets map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gets = map[string]int{}
	for k, v := range c.gets {
		gets[k] = v
	}
	return append([]string(nil), c.puts...), gets
}

func localBlobs(t *testing.T) *countingBlobs {
	t.Helper()
	st, err := fs.New(filepath.Join(t.TempDir(), "blobs"))
	must(t, err)
	t.Cleanup(func() { st.Close() })
	return &countingBlobs{Store: st}
}

// sharedStore is an empty image store on shared.
func sharedStore(t *testing.T, shared blob.Store, desc string) *Store {
	t.Helper()
	s := openStore(t)
	s.SetShared(shared, desc)
	return s
}

// testImageTar is an OCI-layout tarball of a random two-layer image, and
// the image's manifest digest.
func testImageTar(t *testing.T) ([]byte, string) {
	t.Helper()
	src := randomImage(t)
	return ociLayoutTar(t, src, nil), digestStr(t, src)
}

// tree describes every entry under dir: type, mode, owner and content.
func tree(t *testing.T, dirs []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i, dir := range dirs {
		must(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			desc := fi.Mode().String()
			switch {
			case fi.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				desc += " " + digestOf(b)
			case fi.Mode()&os.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				desc += " -> " + l
			}
			out[fmt.Sprintf("%d/%s", i, rel)] = desc
			return nil
		}))
	}
	return out
}

func storeBlobs(t *testing.T, s *Store) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Root(), "blobs", "sha256"))
	must(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func dirEntries(t *testing.T, p string) int {
	t.Helper()
	ents, err := os.ReadDir(p)
	must(t, err)
	return len(ents)
}

// TestSharePublishFetch publishes an import on store A and fetches it by
// name into an empty store B and by digest into C: same digest, same
// blobs byte for byte, same unpacked tree, the name recorded; a second
// fetch downloads nothing.
func TestSharePublishFetch(t *testing.T) {
	needRoot(t)
	t.Run("local", func(t *testing.T) { testPublishFetch(t, localBlobs(t)) })
	t.Run("s3", func(t *testing.T) { testPublishFetch(t, &countingBlobs{Store: s3Blobs(t, s3Prefix(t), "")}) })
}

func testPublishFetch(t *testing.T, shared *countingBlobs) {
	ctx := context.Background()
	tarball, want := testImageTar(t)

	a := sharedStore(t, shared, "test-share")
	imgA, err := a.Import(ctx, bytes.NewReader(tarball), "tiny:v1", nil)
	must(t, err)
	if imgA.Digest != want {
		t.Fatalf("imported %s, want %s", imgA.Digest, want)
	}
	keys := []string{sharedBlobKey(imgA.Digest), "images/names/tiny/v1"}
	for _, l := range imgA.Layers {
		keys = append(keys, sharedBlobKey(l))
	}
	for _, k := range keys {
		if _, err := shared.Stat(ctx, k); err != nil {
			t.Errorf("published key %s: %v", k, err)
		}
	}

	b := sharedStore(t, shared, "test-share")
	var events []api.Progress
	imgB, err := b.Ensure(ctx, "tiny:v1", func(p api.Progress) { events = append(events, p) })
	must(t, err)
	if imgB.Digest != imgA.Digest || imgB.Name != "tiny:v1" || strings.Join(imgB.DiffIDs, ",") != strings.Join(imgA.DiffIDs, ",") || imgB.Size != imgA.Size {
		t.Fatalf("fetched %+v\nwant    %+v", imgB, imgA)
	}
	sawBytes := false
	for _, e := range events {
		sawBytes = sawBytes || (e.Total > 0 && e.Current == e.Total)
	}
	if !sawBytes || !events[len(events)-1].Done {
		t.Errorf("fetch progress: %+v", events)
	}
	for _, d := range storeBlobs(t, a) {
		wa, _ := os.ReadFile(filepath.Join(a.Root(), "blobs", "sha256", d))
		wb, err := os.ReadFile(filepath.Join(b.Root(), "blobs", "sha256", d))
		if err != nil || !bytes.Equal(wa, wb) {
			t.Errorf("blob %s differs in the fetching store (%v)", d, err)
		}
	}
	dirsA, err := a.LayerDirs(ctx, imgA)
	must(t, err)
	dirsB, err := b.LayerDirs(ctx, imgB)
	must(t, err)
	ta, tb := tree(t, dirsA), tree(t, dirsB)
	if fmt.Sprint(ta) != fmt.Sprint(tb) || len(ta) < 3 {
		t.Errorf("unpacked trees differ:\n%v\n%v", ta, tb)
	}
	list, err := b.List(ctx)
	must(t, err)
	if len(list) != 1 || list[0].Name != "tiny:v1" || list[0].Digest != want {
		t.Errorf("list after fetch: %+v", list)
	}

	// Again: nothing is downloaded.
	_, before := shared.snapshot()
	if _, err := b.Ensure(ctx, "tiny:v1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fetch(ctx, want, nil); err != nil {
		t.Fatal(err)
	}
	if _, after := shared.snapshot(); fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("a second fetch read the shared store: %v then %v", before, after)
	}

	// By digest, into a third store: the image, without a name.
	c := sharedStore(t, shared, "test-share")
	imgC, err := c.Ensure(ctx, want, nil)
	must(t, err)
	if imgC.Digest != want || imgC.Name != "" {
		t.Errorf("by digest: %+v", imgC)
	}
	if _, err := c.Resolve(ctx, "tiny:v1"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Errorf("a fetch by digest recorded a name: %v", err)
	}

	// Neither here nor shared: not found, naming the shared store.
	_, err = c.Ensure(ctx, "nothing-here", nil)
	if !errdefs.IsKind(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "test-share") {
		t.Errorf("missing image: %v", err)
	}
	// Without a shared store Ensure is Resolve.
	plain := openStore(t)
	if _, err := plain.Ensure(ctx, "tiny:v1", nil); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Errorf("unshared store: %v", err)
	}
}

// TestSharePublishOrder: layers and config before the manifest, the
// manifest before the name, the name last; blobs already there are not
// uploaded again.
func TestSharePublishOrder(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	shared := localBlobs(t)
	tarball, _ := testImageTar(t)
	a := sharedStore(t, shared, "test-share")
	img, err := a.Import(ctx, bytes.NewReader(tarball), "tiny", nil)
	must(t, err)
	puts, _ := shared.snapshot()
	rec := a.idx.Images[img.Digest]
	want := []string{}
	for _, l := range img.Layers {
		want = append(want, sharedBlobKey(l))
	}
	want = append(want, sharedBlobKey(rec.ConfigD), sharedBlobKey(img.Digest), "images/names/tiny")
	if strings.Join(puts, "\n") != strings.Join(want, "\n") {
		t.Fatalf("puts in order:\n%s\nwant:\n%s", strings.Join(puts, "\n"), strings.Join(want, "\n"))
	}

	// Publishing again, or the same image from another node, uploads no
	// blob: only the name.
	must(t, a.Publish(ctx, "tiny", nil))
	d := sharedStore(t, shared, "test-share")
	if _, err := d.Import(ctx, bytes.NewReader(tarball), "other", nil); err != nil {
		t.Fatal(err)
	}
	puts2, _ := shared.snapshot()
	if extra := puts2[len(puts):]; strings.Join(extra, ",") != "images/names/tiny,images/names/other" {
		t.Errorf("re-publish uploaded %v", extra)
	}
	// A blob in the shared store that differs from the local one (here:
	// truncated) is replaced.
	must(t, shared.Delete(ctx, sharedBlobKey(img.Layers[0])))
	if _, err := shared.Put(ctx, sharedBlobKey(img.Layers[0]), strings.NewReader("short"), ""); err != nil {
		t.Fatal(err)
	}
	must(t, a.Publish(ctx, img.Digest, nil))
	info, err := shared.Stat(ctx, sharedBlobKey(img.Layers[0]))
	must(t, err)
	if "sha256:"+info.SHA256 != img.Layers[0] {
		t.Errorf("a damaged shared blob was kept: %+v", info)
	}
}

// TestShareFetchRacesPublish fetches, over and over into fresh stores,
// while a slow publish runs: each fetch sees nothing (not found) or the
// whole image, never a half-published one.
func TestShareFetchRacesPublish(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	shared := localBlobs(t)
	shared.delay = 40 * time.Millisecond
	tarball, want := testImageTar(t)
	a := sharedStore(t, shared, "test-share")
	done := make(chan error, 1)
	go func() {
		_, err := a.Import(ctx, bytes.NewReader(tarball), "racy", nil)
		done <- err
	}()
	outcomes := map[string]int{}
	finished := false
	for !finished {
		select {
		case err := <-done:
			must(t, err)
			finished = true // one more round after the publish
		default:
		}
		for _, ref := range []string{"racy", want} {
			s := sharedStore(t, shared, "test-share")
			img, err := s.Fetch(ctx, ref, nil)
			switch {
			case err == nil && img.Digest == want:
				outcomes[ref+" whole"]++
				if _, err := s.LayerDirs(ctx, img); err != nil {
					t.Fatalf("fetched image %s has no layers: %v", ref, err)
				}
			case errdefs.IsKind(err, errdefs.ErrNotFound):
				outcomes[ref+" nothing"]++
			default:
				t.Fatalf("fetch of %s racing a publish: %v (image %+v)", ref, err, img)
			}
		}
	}
	if outcomes["racy whole"] == 0 || outcomes[want+" whole"] == 0 || outcomes["racy nothing"] == 0 {
		t.Errorf("the race was not exercised: %v", outcomes)
	}
	t.Logf("outcomes: %v", outcomes)
}

// TestShareConcurrentFetchesOnce: eight starts wanting one missing image
// download each blob once.
func TestShareConcurrentFetchesOnce(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	shared := localBlobs(t)
	tarball, want := testImageTar(t)
	a := sharedStore(t, shared, "test-share")
	_, err := a.Import(ctx, bytes.NewReader(tarball), "tiny", nil)
	must(t, err)
	b := sharedStore(t, shared, "test-share")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img, err := b.Ensure(ctx, "tiny", nil)
			if err == nil && img.Digest != want {
				err = fmt.Errorf("digest %s", img.Digest)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
	_, gets := shared.snapshot()
	if len(gets) != 5 { // name, manifest, config, two layers
		t.Errorf("gets: %v", gets)
	}
	for k, n := range gets {
		if n != 1 {
			t.Errorf("%s read %d times", k, n)
		}
	}
}

// TestFlightOutlivesItsCallers: a caller that gives up does not fail the
// others waiting for the same fetch, and when every caller has gone the
// work still finishes, so the next caller gets its result without a
// second run.
func TestFlightOutlivesItsCallers(t *testing.T) {
	var f flights
	release := make(chan struct{})
	var runs atomic.Int32
	fn := func(ctx context.Context) error {
		runs.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	impatient, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- f.do(impatient, "k", fn) }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { second <- f.do(context.Background(), "k", fn) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient caller: %v", err)
	}
	close(release)
	if err := <-second; err != nil || runs.Load() != 1 {
		t.Fatalf("patient caller: %v after %d runs", err, runs.Load())
	}

	// Everyone leaves: the run goes on, and a caller arriving while it
	// runs joins it.
	release2 := make(chan struct{})
	var runs2 atomic.Int32
	slow := func(ctx context.Context) error {
		runs2.Add(1)
		select {
		case <-release2:
			return errors.New("the one result")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := f.do(ctx2, "j", slow); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	late := make(chan error, 1)
	go func() { late <- f.do(context.Background(), "j", slow) }()
	time.Sleep(20 * time.Millisecond)
	close(release2)
	if err := <-late; err == nil || err.Error() != "the one result" || runs2.Load() != 1 {
		t.Fatalf("after every caller left: %v after %d runs", err, runs2.Load())
	}
}

// s3Blobs is a blob store on the real S3 server (scripts/s3-server.sh),
// under a prefix of its own; endpoint overrides the server's (a fault
// proxy in front of it).
func s3Blobs(t *testing.T, prefix, endpoint string) *s3.Store {
	t.Helper()
	srv := s3test.Require(t)
	srv.EnsureBucket(t)
	if endpoint == "" {
		endpoint = srv.Endpoint
	}
	st, err := s3.New(context.Background(), s3.Config{Endpoint: endpoint, Bucket: srv.Bucket, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		Prefix: prefix, MaxRetries: 2, DialTimeout: time.Second})
	must(t, err)
	return st
}

func s3Prefix(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	p := "img-" + hex.EncodeToString(b) + "/"
	srv := s3test.Require(t)
	t.Cleanup(func() { srv.RemovePrefix(t, p) })
	return p
}

// TestShareS3CorruptBlobRefused: a layer whose bytes were changed in the
// bucket is refused, both when its recorded sha256 was left alone (bit
// rot, a careless edit) and when the tamperer rewrote it consistently;
// the fetching store keeps nothing of the image. Negative control: with
// the original bytes back, the same fetch succeeds.
func TestShareS3CorruptBlobRefused(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	prefix := s3Prefix(t)
	shared := s3Blobs(t, prefix, "")
	tarball, want := testImageTar(t)
	a := sharedStore(t, shared, "s3-under-test")
	img, err := a.Import(ctx, bytes.NewReader(tarball), "tiny", nil)
	must(t, err)

	srv := s3test.Require(t)
	raw := srv.Client(t)
	layerKey := sharedBlobKey(img.Layers[1])
	object := prefix + layerKey + ".blob~" // blob/s3's object naming
	obj, err := raw.GetObject(ctx, srv.Bucket, object, minio.GetObjectOptions{})
	must(t, err)
	orig, err := io.ReadAll(obj)
	must(t, err)
	st, err := obj.Stat()
	must(t, err)
	flipped := append([]byte(nil), orig...)
	flipped[len(flipped)/2] ^= 0x01
	_, err = raw.PutObject(ctx, srv.Bucket, object, bytes.NewReader(flipped), int64(len(flipped)),
		minio.PutObjectOptions{UserMetadata: map[string]string{"berth-sha256": st.Metadata.Get("X-Amz-Meta-Berth-Sha256")}})
	must(t, err)

	nothingKept := func(s *Store, what string) {
		t.Helper()
		if _, err := s.Resolve(ctx, "tiny"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
			t.Errorf("%s: the image is visible: %v", what, err)
		}
		if b := storeBlobs(t, s); len(b) != 0 {
			t.Errorf("%s: blobs left: %v", what, b)
		}
		if n := dirEntries(t, filepath.Join(s.Root(), "l")); n != 0 {
			t.Errorf("%s: %d unpacked layers left", what, n)
		}
		if n := dirEntries(t, filepath.Join(s.Root(), "tmp")); n != 0 {
			t.Errorf("%s: %d temp files left", what, n)
		}
	}
	b := sharedStore(t, shared, "s3-under-test")
	_, err = b.Ensure(ctx, "tiny", nil)
	if err == nil || errdefs.IsKind(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), img.Layers[1]) {
		t.Fatalf("flipped byte: %v", err)
	}
	t.Logf("flipped byte: %v", err)
	nothingKept(b, "flipped byte")

	// Rewritten with a matching recorded sha256: only the image's own
	// digest catches it.
	must(t, shared.Delete(ctx, layerKey))
	if _, err := shared.Put(ctx, layerKey, bytes.NewReader(flipped), ""); err != nil {
		t.Fatal(err)
	}
	_, err = b.Ensure(ctx, "tiny", nil)
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("consistently tampered layer: %v", err)
	}
	t.Logf("tampered layer: %v", err)
	nothingKept(b, "tampered layer")

	// Negative control.
	must(t, shared.Delete(ctx, layerKey))
	if _, err := shared.Put(ctx, layerKey, bytes.NewReader(orig), ""); err != nil {
		t.Fatal(err)
	}
	got, err := b.Ensure(ctx, "tiny", nil)
	must(t, err)
	if got.Digest != want {
		t.Fatalf("fetched %s, want %s", got.Digest, want)
	}
}

// TestShareS3Unavailable: with the S3 endpoint down, a fetch fails as
// unavailable naming the blob store, and a pull or import keeps the image
// here but says the publish failed.
func TestShareS3Unavailable(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	srv := s3test.Require(t)
	prefix := s3Prefix(t)
	tarball, want := testImageTar(t)
	a := sharedStore(t, s3Blobs(t, prefix, ""), "s3-under-test")
	_, err := a.Import(ctx, bytes.NewReader(tarball), "tiny", nil)
	must(t, err)

	px := s3test.NewFaultProxy(t, srv.Endpoint)
	b := sharedStore(t, s3Blobs(t, prefix, px.URL), "s3-behind-proxy")
	px.Down.Store(true)
	_, err = b.Ensure(ctx, "tiny", nil)
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "s3-behind-proxy") {
		t.Fatalf("fetch with S3 down: %v", err)
	}
	t.Logf("fetch with S3 down: %v", err)
	// Nothing listening at all (connection refused).
	px2 := s3test.NewFaultProxy(t, srv.Endpoint)
	gone := sharedStore(t, s3Blobs(t, prefix, px2.URL), "s3-gone")
	px2.Close()
	_, err = gone.Ensure(ctx, "tiny", nil)
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "s3-gone") {
		t.Fatalf("fetch with S3 gone: %v", err)
	}
	t.Logf("fetch with S3 gone: %v", err)

	_, err = b.Import(ctx, bytes.NewReader(tarball), "mine", nil)
	if !errdefs.IsKind(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "stored on this node") {
		t.Fatalf("import with S3 down: %v", err)
	}
	if img, err := b.Resolve(ctx, "mine"); err != nil || img.Digest != want {
		t.Fatalf("import with S3 down did not keep the image: %v", err)
	}
	// Back up: the publish can be repeated.
	px.Down.Store(false)
	must(t, b.Publish(ctx, "mine", nil))
	c := sharedStore(t, s3Blobs(t, prefix, ""), "s3-under-test")
	if img, err := c.Ensure(ctx, "mine", nil); err != nil || img.Digest != want {
		t.Fatalf("after the retried publish: %v", err)
	}
}

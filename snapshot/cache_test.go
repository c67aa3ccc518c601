package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/berth-sh/berth/internal/errdefs"
)

// smallLayer captures a little upper and returns its blob.
func smallLayer(t *testing.T, content string) []byte {
	u := t.TempDir()
	mustWrite(t, filepath.Join(u, "dir/file"), content, 0o644)
	whiteout(t, filepath.Join(u, "deleted"))
	b, _ := capture(t, []string{u}, CaptureOptions{})
	return b
}

func newCache(t *testing.T, l Limits) (*Cache, string) {
	dir := filepath.Join(t.TempDir(), "layers")
	c, err := NewCacheWithLimits(dir, l)
	must(t, err)
	t.Cleanup(func() { c.Close() }) // before the temp dir goes
	return c, dir
}

func TestCacheLayerOnceAndRemove(t *testing.T) {
	needRoot(t)
	c, dir := newCache(t, Limits{})
	blob := smallLayer(t, "v1")
	sum := shaHex(blob)
	store := memBlobs{"k": blob}
	var calls int64
	ctx := context.Background()
	p, err := c.Layer(ctx, "snap_a", sum, store.opener("k", &calls))
	must(t, err)
	if p != filepath.Join(dir, sum[:12]) {
		t.Fatalf("layer path %s, want <dir>/<12 hex>", p)
	}
	if b, err := os.ReadFile(filepath.Join(p, "dir/file")); err != nil || string(b) != "v1" {
		t.Fatalf("layer content: %q %v", b, err)
	}
	if !strings.HasPrefix(describe(t, p, false)["deleted"], "chr 0") {
		t.Fatal("whiteout not restored in overlay form")
	}
	// Cached: no second read. Another id with identical content shares it.
	p2, err := c.Layer(ctx, "snap_b", sum, store.opener("k", &calls))
	must(t, err)
	if p2 != p || calls != 1 {
		t.Fatalf("second Layer: path %s, %d blob reads", p2, calls)
	}
	// A new Cache on the same dir (daemon restart) finds it too.
	c2, err := NewCache(dir)
	must(t, err)
	if p3, err := c2.Layer(ctx, "snap_a", sum, store.opener("k", &calls)); err != nil || p3 != p || calls != 1 {
		t.Fatalf("after reopen: %s %v, %d reads", p3, err, calls)
	}

	must(t, c.Remove("snap_a"))
	if _, err := os.Stat(p); err != nil {
		t.Fatal("layer removed while snap_b still uses it")
	}
	must(t, c.Remove("snap_b"))
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("layer still there after its last id was removed: %v", err)
	}
	must(t, c.Remove("snap_b")) // unknown id: fine
	if ents := dirEntries(t, dir); len(ents) != 1 || ents[0] != ".ids" {
		t.Fatalf("cache dir after removes: %v", ents)
	}
	if _, err := c.Layer(ctx, "../x", sum, store.opener("k", nil)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, ".ids", "snap_d"), []byte(strings.Repeat("ab", 32)), 0o600))
	if _, err := c.Layer(ctx, "snap_d", sum, store.opener("k", nil)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("id recorded with another digest: %v", err)
	}
	if _, err := c.Layer(ctx, "snap_a", "abc", store.opener("k", nil)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad sha: %v", err)
	}
}

// TestCacheRefusesTamperedBlobs: checklist #10. Nothing may appear in the
// cache dir for a blob whose digest does not match.
func TestCacheRefusesTamperedBlobs(t *testing.T) {
	needRoot(t)
	blob := smallLayer(t, "original content")
	sum := shaHex(blob)
	ctx := context.Background()

	// Tamper inside the payload and re-compress: a valid zstd+tar stream,
	// so only the digest check can catch it.
	raw := decompress(t, blob)
	evil := compress(t, bytes.Replace(raw, []byte("original content"), []byte("hacked! content!"), 1))
	truncated := blob[:len(blob)/2]
	for name, b := range map[string][]byte{"tampered": evil, "truncated": truncated, "empty": {}} {
		t.Run(name, func(t *testing.T) {
			c, dir := newCache(t, Limits{})
			store := memBlobs{"k": b}
			_, err := c.Layer(ctx, "snap_x", sum, store.opener("k", nil))
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "snapshot snap_x is corrupt: sha256 mismatch") {
				t.Fatalf("got %v", err)
			}
			if ents := dirEntries(t, dir); len(ents) != 0 {
				t.Fatalf("cache dir not empty after refusal: %v", ents)
			}
		})
	}
	// Negative control: the tampered blob is a perfectly unpackable
	// layer; with its own digest it is accepted, so the refusal above is
	// the digest check and nothing else.
	c, _ := newCache(t, Limits{})
	p, err := c.Layer(ctx, "snap_y", shaHex(evil), memBlobs{"k": evil}.opener("k", nil))
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(p, "dir/file")); string(b) != "hacked! content!" {
		t.Fatalf("control layer content %q", b)
	}
	// A reader error from the blob store surfaces as such.
	c2, dir2 := newCache(t, Limits{})
	_, err = c2.Layer(ctx, "snap_z", sum, func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(blob[:10]), errReader{})), nil
	})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || len(dirEntries(t, dir2)) != 0 {
		t.Fatalf("reader error: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// zeroBomb returns a tar+zstd stream holding one file of n zero bytes.
func zeroBomb(t *testing.T, n int64) []byte {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest))
	must(t, err)
	tw := tar.NewWriter(enc)
	must(t, tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Size: n, Mode: 0o644, ModTime: time.Unix(0, 0)}))
	zero := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(zero)) {
		_, err := tw.Write(zero[:min(int64(len(zero)), left)])
		must(t, err)
	}
	must(t, tw.Close())
	must(t, enc.Close())
	return buf.Bytes()
}

func TestCacheRefusesCompressionBombs(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	gib := zeroBomb(t, 1<<30)
	t.Logf("1 GiB of zeros compresses to %d bytes (%d:1)", len(gib), (1<<30)/len(gib))

	c, dir := newCache(t, Limits{MaxUncompressedBytes: 100 << 20})
	_, err := c.Layer(ctx, "snap_bomb", shaHex(gib), memBlobs{"k": gib}.opener("k", nil))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "compression bomb") {
		t.Fatalf("1 GiB bomb under a 100 MiB cap: %v", err)
	}
	if ents := dirEntries(t, dir); len(ents) != 0 {
		t.Fatalf("partial layer left behind: %v", ents)
	}

	// A flood of tiny headers carries no file data for Unpack's size caps
	// to see; the decompressed-bytes cap stops it.
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for i := 0; i < 40_000; i++ { // 20 MiB of tar headers
		must(t, tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}))
	}
	must(t, tw.Close())
	flood := compress(t, raw.Bytes())
	c, dir = newCache(t, Limits{MaxUncompressedBytes: 4 << 20})
	_, err = c.Layer(ctx, "snap_flood", shaHex(flood), memBlobs{"k": flood}.opener("k", nil))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "compression bomb") || len(dirEntries(t, dir)) != 0 {
		t.Fatalf("header flood: %v (dir %v)", err, dirEntries(t, dir))
	}
	t.Logf("header flood: %v", err)

	// The ratio guard, with the absolute cap at its default: 200 MiB
	// from a few KiB is far past 1000:1 once past the floor.
	small := zeroBomb(t, 200<<20)
	c, dir = newCache(t, Limits{RatioFloor: 10 << 20})
	_, err = c.Layer(ctx, "snap_ratio", shaHex(small), memBlobs{"k": small}.opener("k", nil))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || len(dirEntries(t, dir)) != 0 {
		t.Fatalf("ratio bomb: %v (dir %v)", err, dirEntries(t, dir))
	}
	// Negative control: the same blob with default limits (floor 1 GiB)
	// is accepted, so the refusals above are the guards.
	c, _ = newCache(t, Limits{})
	p, err := c.Layer(ctx, "snap_ok", shaHex(small), memBlobs{"k": small}.opener("k", nil))
	must(t, err)
	if st, err := os.Stat(filepath.Join(p, "zeros")); err != nil || st.Size() != 200<<20 {
		t.Fatalf("control: %v %v", st, err)
	}
}

// TestCacheRefusesEscapes: a blob with the right digest (a hostile
// controller record or blob-store writer) but a path escape must fail
// inside image.Unpack, with the error surfaced and a sibling canary intact.
func TestCacheRefusesEscapes(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	mk := func(hdrs ...*tar.Header) []byte {
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		for _, h := range hdrs {
			if h.Mode == 0 {
				h.Mode = 0o644
			}
			must(t, tw.WriteHeader(h))
			if h.Size > 0 {
				_, err := tw.Write(bytes.Repeat([]byte("P"), int(h.Size)))
				must(t, err)
			}
		}
		must(t, tw.Close())
		return compress(t, raw.Bytes())
	}
	cases := map[string][]byte{
		"dotdot": mk(&tar.Header{Name: "ok", Size: 1, Typeflag: tar.TypeReg},
			&tar.Header{Name: "../../x", Size: 5, Typeflag: tar.TypeReg}),
		"device": mk(&tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8}),
	}
	for name, blob := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			canary := filepath.Join(root, "x")
			mustWrite(t, canary, "canary", 0o644)
			c, err := NewCache(filepath.Join(root, "layers"))
			must(t, err)
			_, err = c.Layer(ctx, "snap_esc", shaHex(blob), memBlobs{"k": blob}.opener("k", nil))
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("got %v", err)
			}
			if b, _ := os.ReadFile(canary); string(b) != "canary" {
				t.Fatalf("canary changed: %q", b)
			}
			if ents := dirEntries(t, root); len(ents) != 2 {
				t.Fatalf("something was created beside the cache: %v", ents)
			}
			if ents := dirEntries(t, filepath.Join(root, "layers")); len(ents) != 0 {
				t.Fatalf("partial layer left: %v", ents)
			}
		})
	}
}

func TestCacheConcurrentUnpackOnce(t *testing.T) {
	needRoot(t)
	c, _ := newCache(t, Limits{})
	blob := smallLayer(t, "shared")
	sum := shaHex(blob)
	var opens atomic.Int64
	gate := make(chan struct{})
	open := func(context.Context) (io.ReadCloser, error) {
		opens.Add(1)
		<-gate // hold the first unpack until every caller is waiting
		return io.NopCloser(bytes.NewReader(blob)), nil
	}
	const n = 8
	var wg sync.WaitGroup
	paths := make([]string, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			paths[i], errs[i] = c.Layer(context.Background(), "snap_fork", sum, open)
		}(i)
	}
	// Let the first caller in; the others block on the per-digest lock
	// (if they did not, they would call open too and the count shows it).
	for opens.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("caller %d: %s %v", i, paths[i], errs[i])
		}
	}
	if got := opens.Load(); got != 1 {
		t.Fatalf("blob opened %d times, want 1", got)
	}
}

// TestCacheShortSlotCollision: a different digest sharing the 12-digit
// prefix (which a hostile sandbox could grind) must never be served.
func TestCacheShortSlotCollision(t *testing.T) {
	needRoot(t)
	c, dir := newCache(t, Limits{})
	blob := smallLayer(t, "mine")
	sum := shaHex(blob)
	other := sum[:12] + strings.Repeat("0", 52)
	must(t, os.MkdirAll(filepath.Join(dir, sum[:12]), 0o755))
	mustWrite(t, filepath.Join(dir, sum[:12], "dir/file"), "attacker", 0o644)
	must(t, os.WriteFile(filepath.Join(dir, sum[:12]+".sha256"), []byte(other+"\n"), 0o600))
	p, err := c.Layer(context.Background(), "snap_c", sum, memBlobs{"k": blob}.opener("k", nil))
	must(t, err)
	if p != filepath.Join(dir, sum) {
		t.Fatalf("path %s, want the full-digest slot", p)
	}
	if b, _ := os.ReadFile(filepath.Join(p, "dir/file")); string(b) != "mine" {
		t.Fatalf("served %q", b)
	}
	must(t, c.Remove("snap_c"))
	if _, err := os.Stat(filepath.Join(dir, sum[:12], "dir/file")); err != nil {
		t.Fatal("Remove deleted the other digest's layer")
	}
}

func TestNewCacheRejectsOverlaySeparators(t *testing.T) {
	if _, err := NewCache(filepath.Join(t.TempDir(), "a,upperdir=x")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		if len(id) != 21 || !strings.HasPrefix(id, "snap_") || seen[id] || validID(id) != nil {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

// A layer written in an earlier boot and never flushed may have lost
// blocks: NewCache drops it. One from this boot is kept (a daemon crash
// leaves the data in the page cache).
func TestPendingLayersAfterRestart(t *testing.T) {
	dir := t.TempDir()
	for slot, boot := range map[string]string{"aaaaaaaaaaaa": "an-earlier-boot", "bbbbbbbbbbbb": bootID()} {
		os.MkdirAll(filepath.Join(dir, slot), 0o755)
		os.WriteFile(filepath.Join(dir, slot, "f"), []byte("x"), 0o644)
		os.WriteFile(filepath.Join(dir, slot+".sha256"), []byte(slot), 0o644)
		os.WriteFile(filepath.Join(dir, slot+pendingSuffix), []byte(boot), 0o644)
	}
	if _, err := NewCache(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "aaaaaaaaaaaa")); !os.IsNotExist(err) {
		t.Fatalf("layer from an earlier boot survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "aaaaaaaaaaaa.sha256")); !os.IsNotExist(err) {
		t.Fatalf("marker of a dropped layer survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bbbbbbbbbbbb", "f")); err != nil {
		t.Fatalf("layer from this boot was dropped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bbbbbbbbbbbb"+pendingSuffix)); !os.IsNotExist(err) {
		t.Fatalf("this boot's layer is still pending after NewCache flushed it: %v", err)
	}
}

// A blob over the memory spool's size moves to disk mid-copy and is still
// verified and unpacked whole; a tampered one is still refused.
func TestCacheSpoolsLargeBlobsToDisk(t *testing.T) {
	needRoot(t)
	saved := memSpoolMax
	memSpoolMax = 64
	defer func() { memSpoolMax = saved }()
	c, _ := newCache(t, Limits{})
	blob := smallLayer(t, strings.Repeat("spooled ", 4096))
	if int64(len(blob)) <= memSpoolMax {
		t.Fatalf("blob of %d bytes does not exceed the spool limit", len(blob))
	}
	var calls int64
	p, err := c.Layer(context.Background(), "snap_big", shaHex(blob), memBlobs{"k": blob}.opener("k", &calls))
	must(t, err)
	if b, err := os.ReadFile(filepath.Join(p, "dir/file")); err != nil || string(b) != strings.Repeat("spooled ", 4096) {
		t.Fatalf("layer content after a disk spool: %d bytes, %v", len(b), err)
	}
	bad := append([]byte(nil), blob...)
	bad[len(bad)-1] ^= 1
	if _, err := c.Layer(context.Background(), "snap_bad", shaHex(blob[:len(blob)-1]), memBlobs{"k": bad}.opener("k", &calls)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("tampered large blob: %v, want invalid-argument", err)
	}
}

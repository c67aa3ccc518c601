package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/snapshot/erofs"
)

// maxWindow caps the zstd window a blob may ask the decoder to allocate.
// zstd -19 uses 8 MiB and our encoder less; a forged header asking for
// gigabytes is refused instead of allocated.
const maxWindow = 64 << 20

// Cache turns snapshot layers into overlay lowers once per host: each blob
// is verified, then written as one EROFS image that the kernel mounts
// read-only (package snapshot/erofs), so a first restore costs one image
// write and one mount instead of a file creation per entry. Where the
// kernel cannot mount an image (no erofs, no file-backed mounts, no
// privilege) the layer is unpacked into a directory as before.
//
// Layout under dir (one Cache per dir; the daemon's data-dir lock makes
// that so):
//
//	<sha[:12]>/          the layer: the image mounted here, or an unpacked
//	                     tree (short: the lowerdir option is one page)
//	<sha[:12]>.erofs     the layer's EROFS image (absent for an unpacked one)
//	<sha[:12]>.erofs.sha256  the image's sha256, checked before every mount
//	<sha[:12]>.sha256    the blob's full digest, written last: a layer counts
//	                     only once this says so (a crash leaves a stale one, redone)
//	<sha>/, <sha>.*      the same, for the rare sha whose 12-digit slot is
//	                     taken by another digest (48 bits can be ground by a
//	                     hostile sandbox: a short-prefix match must never serve
//	                     another snapshot's files)
//	.ids/<id>            which snapshot ids use which digest (for Remove)
//	.tmp-*               unpacks and image builds in progress; removed by NewCache
//
// Mounts outlive the daemon (like its containers): a restarted daemon finds
// a layer still mounted and uses it; one that is not (after a reboot) is
// verified against its recorded image digest before it is mounted again,
// and a mismatch drops the image and rebuilds it from the verified blob.
type Cache struct {
	dir    string
	limits Limits
	// unpack is set once mounting an image failed for want of kernel
	// support or privilege: later layers are unpacked directly.
	unpack atomic.Bool

	// destroy deletes an adopted layer's tree (SetDestroyer).
	destroy func(path string) error

	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// NewCache opens (creating) a layer cache in dir with default Limits.
func NewCache(dir string) (*Cache, error) { return NewCacheWithLimits(dir, Limits{}) }

// NewCacheWithLimits is NewCache with explicit restore limits.
func NewCacheWithLimits(dir string, l Limits) (*Cache, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// Layer paths become lowerdir entries: overlay would parse these as
	// option or layer separators (an injected second upperdir=).
	if strings.ContainsAny(abs, ",:\\\n") {
		return nil, errdefs.InvalidArgument("snapshot cache dir %q contains a character overlay cannot take", abs)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot cache: %w", err)
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, err
	}
	c := &Cache{dir: abs, limits: l.withDefaults(), locks: map[string]*keyLock{}}
	boot := bootID()
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			os.RemoveAll(filepath.Join(abs, name)) // RemoveAll never follows symlinks; never a mount point
		case strings.HasSuffix(name, pendingSuffix):
			slot := strings.TrimSuffix(name, pendingSuffix)
			mark, err := os.ReadFile(filepath.Join(abs, name))
			if errors.Is(err, fs.ErrNotExist) {
				continue // flushed meanwhile (by a Cache still open on dir)
			}
			if strings.TrimSpace(string(mark)) == boot && boot != "" {
				c.settle(slot) // same boot: the data is in the page cache
				continue
			}
			// Written before a reboot and never flushed: its blocks may
			// be gone. Drop it; the next restore fetches it again.
			c.drop(slot)
			os.Remove(filepath.Join(abs, name))
		}
	}
	return c, nil
}

const pendingSuffix = ".pending"

// settle flushes a layer to disk and clears its pending mark.
func (c *Cache) settle(slot string) {
	err := fsyncFile(filepath.Join(c.dir, slot+imageSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		err = syncfs(filepath.Join(c.dir, slot)) // an unpacked layer
	}
	if err == nil {
		os.Remove(filepath.Join(c.dir, slot+pendingSuffix))
	}
}

const (
	imageSuffix    = ".erofs"
	imageSumSuffix = ".erofs.sha256"
)

// drop unmounts and deletes a slot, its completeness marker first: a crash
// mid-delete must not leave a half-deleted layer that lookup would serve.
func (c *Cache) drop(slot string) error {
	p := filepath.Join(c.dir, slot)
	if err := os.Remove(p + ".sha256"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := unmountLayer(p); err != nil {
		return err
	}
	if _, err := os.Lstat(p + subvolSuffix); err == nil {
		if c.destroy == nil {
			return errdefs.FailedPrecondition("snapshot cache: layer %s is an adopted tree, and no destroyer is set", slot)
		}
		if err := c.destroy(p); err != nil {
			return err
		}
	} else if err := os.RemoveAll(p); err != nil {
		return err
	}
	for _, suf := range []string{imageSuffix, imageSumSuffix, pendingSuffix, subvolSuffix} {
		if err := os.Remove(p + suf); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Close unmounts every layer image mounted under the cache dir (MNT_DETACH:
// an overlay still using one keeps it alive until it goes). The daemon
// leaves its layers mounted, as it leaves its containers running; tests
// and a host being torn down call this.
func (c *Cache) Close() error {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	var first error
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			if err := unmountLayer(filepath.Join(c.dir, e.Name())); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// bootID identifies this boot of the kernel.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Layer returns the unpacked read-only directory for snapshot id whose blob
// has the given sha256, unpacking it on first use:
//
//  1. open()'s stream is copied to an unnamed temp file while hashed;
//     a digest that differs (tampered or truncated blob) is refused with
//     errdefs.InvalidArgument before a single byte is decompressed or
//     anything appears in the cache dir (checklist #10).
//  2. zstd is decoded with a capped window and a cap on total output,
//     min(MaxUncompressedBytes, max(RatioFloor, MaxRatio*compressed)): a
//     compression bomb fails with errdefs.ResourceExhausted.
//  3. erofs.FromTar (image.Unpack's hostile-layer rules: no escapes, no
//     devices, xattrs dropped) writes the layer's EROFS image, whose own
//     digest is recorded, and the image is mounted read-only at the
//     returned directory. Where images cannot be mounted, image.Unpack
//     writes a temp dir that is renamed into place instead.
//
// Concurrent calls for one digest wait for a single build.
func (c *Cache) Layer(ctx context.Context, id, sha256hex string, open func(ctx context.Context) (io.ReadCloser, error)) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	sum, err := validSHA(sha256hex)
	if err != nil {
		return "", err
	}
	unlock := c.lock(sum)
	defer unlock()

	// A snapshot's digest never changes; a second digest for one id is a
	// controller bug or a forged record, and would orphan the first layer.
	if prev := readSum(filepath.Join(c.dir, ".ids", id)); prev != "" && prev != sum {
		return "", errdefs.FailedPrecondition("snapshot %s is cached with digest %s, not %s", id, prev, sum)
	}
	p, ok, err := c.lookup(sum)
	if err != nil {
		return "", err
	}
	if ok {
		return p, c.ref(id, sum)
	}
	slot := c.freeSlot(sum)
	if err := c.fill(ctx, id, sum, slot, open); err != nil {
		return "", err
	}
	return filepath.Join(c.dir, slot), c.ref(id, sum)
}

func (c *Cache) fill(ctx context.Context, id, sum, slot string, open func(ctx context.Context) (io.ReadCloser, error)) error {
	spool, err := c.spool(ctx, id, sum, open)
	if err != nil {
		return err
	}
	defer spool.Close()
	st, err := spool.Stat()
	if err != nil {
		return err
	}
	limit := c.limits.maxFor(st.Size())
	if err := c.drop(slot); err != nil { // a stale slot from a crash
		return err
	}
	if !c.unpack.Load() {
		err := c.fillImage(ctx, id, sum, slot, spool, st.Size(), limit)
		if !errors.Is(err, errNoMount) {
			return err
		}
		c.unpack.Store(true)
		if _, err := spool.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	return c.fillDir(ctx, id, sum, slot, spool, st.Size(), limit)
}

// decoder reads the verified blob's tar stream under the restore caps.
func (c *Cache) decoder(id string, spool io.Reader, compressed, limit int64) (*zstd.Decoder, *capReader, error) {
	dec, err := zstd.NewReader(spool, zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderConcurrency(2))
	if err != nil {
		return nil, nil, errdefs.InvalidArgument("snapshot %s is corrupt: %w", id, err)
	}
	return dec, &capReader{r: dec, max: limit, id: id, compressed: compressed}, nil
}

// refusal turns what a tar consumer reported into the layer's error: the
// cap reader's own error first (consumers report a failed read as a
// malformed tar), size refusals as a compression bomb.
func refusal(id string, compressed int64, lr *capReader, err error) error {
	if lr.err != nil {
		return lr.err
	}
	if errdefs.IsKind(err, errdefs.ErrResourceExhausted) {
		// Refused by the tar headers' sizes before reading data.
		return errdefs.ResourceExhausted("snapshot %s is refused as a compression bomb (%d-byte blob): %w", id, compressed, err)
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", id, err)
	}
	return nil
}

// fillImage builds slot's EROFS image from the verified blob, records the
// image's digest, and mounts it. errNoMount means this host cannot mount
// images; nothing is left behind then.
func (c *Cache) fillImage(ctx context.Context, id, sum, slot string, spool io.Reader, compressed, limit int64) error {
	dec, lr, err := c.decoder(id, spool, compressed, limit)
	if err != nil {
		return err
	}
	defer dec.Close()
	f, err := os.CreateTemp(c.dir, ".tmp-*"+imageSuffix)
	if err != nil {
		return fmt.Errorf("snapshot cache: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		f.Close()
		if !ok {
			os.Remove(tmp) // no partial image is ever left behind
			c.drop(slot)
		}
	}()
	ist, err := erofs.FromTar(ctx, lr, f, erofs.Options{
		MaxEntries:    c.limits.MaxEntries,
		MaxFileSize:   limit,
		MaxTotalBytes: limit,
	})
	if err := refusal(id, compressed, lr, err); err != nil {
		return err
	}
	if err := c.install(slot, sum, tmp, ist.Digest); err != nil {
		return err
	}
	ok = true
	return nil
}

// install moves a built image into slot and mounts it: the pending mark
// first (see fillDir), then the image and its digest, the mount, and the
// completeness marker last. On error the caller drops the slot.
func (c *Cache) install(slot, sum, tmp, imgSum string) error {
	if err := writeFileSync(filepath.Join(c.dir, slot+pendingSuffix), bootID()); err != nil {
		return err
	}
	p := filepath.Join(c.dir, slot)
	if err := os.Rename(tmp, p+imageSuffix); err != nil {
		return fmt.Errorf("snapshot cache: %w", err)
	}
	if err := writeFileSync(p+imageSumSuffix, imgSum); err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		return fmt.Errorf("snapshot cache: %w", err)
	}
	if err := mountImage(p+imageSuffix, p); err != nil {
		return err
	}
	if err := writeFileSync(p+".sha256", sum); err != nil {
		return err
	}
	go c.settle(slot)
	return nil
}

// fillDir unpacks the verified blob into slot's directory (no image).
func (c *Cache) fillDir(ctx context.Context, id, sum, slot string, spool io.Reader, compressed, limit int64) error {
	dec, lr, err := c.decoder(id, spool, compressed, limit)
	if err != nil {
		return err
	}
	defer dec.Close()
	tmp, err := os.MkdirTemp(c.dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("snapshot cache: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp) // no partial layer is ever left behind
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	err = image.Unpack(ctx, lr, tmp, image.UnpackOptions{
		MaxEntries:    c.limits.MaxEntries,
		MaxFileSize:   limit,
		MaxTotalBytes: limit,
	})
	if err := refusal(id, compressed, lr, err); err != nil {
		return err
	}
	// A crash must never leave a complete-looking layer with lost blocks,
	// but a syncfs of hundreds of megabytes would double the restore time.
	// So the layer is first marked pending with this boot's id (durably),
	// used at once, and flushed in the background. After a daemon crash
	// in the same boot the page cache still holds the data and NewCache
	// only finishes the flush; after a reboot a pending layer may have lost
	// blocks, and NewCache drops it so it is fetched again.
	if err := writeFileSync(filepath.Join(c.dir, slot+pendingSuffix), bootID()); err != nil {
		return err
	}
	dst := filepath.Join(c.dir, slot)
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("snapshot cache: %w", err)
	}
	ok = true
	if err := writeFileSync(filepath.Join(c.dir, slot+".sha256"), sum); err != nil {
		return err
	}
	go c.settle(slot)
	return nil
}

// Remove drops snapshot id's reference to its layer and deletes the layer
// once no other id uses it. The caller makes sure no mounted sandbox still
// has it as a lower (deleting a live lower changes what sandboxes see).
// An unknown id is not an error.
func (c *Cache) Remove(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	ref := filepath.Join(c.dir, ".ids", id)
	b, err := os.ReadFile(ref)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sum, err := validSHA(strings.TrimSpace(string(b)))
	if err != nil {
		return os.Remove(ref) // garbage marker
	}
	unlock := c.lock(sum)
	defer unlock()
	if err := os.Remove(ref); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(c.dir, ".ids"))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(c.dir, ".ids", e.Name())); err == nil && strings.TrimSpace(string(b)) == sum {
			return nil // still used by another snapshot id with identical content
		}
	}
	for _, slot := range []string{sum[:12], sum} {
		if readSum(filepath.Join(c.dir, slot+".sha256")) != sum {
			continue
		}
		if err := c.drop(slot); err != nil {
			return err
		}
	}
	return nil
}

// lookup returns the layer dir of sum if it is complete, mounting its image
// first if it is not mounted (after a reboot). An image whose digest no
// longer matches the one recorded when it was built is never mounted: the
// slot is dropped and lookup reports a miss, so the layer is rebuilt from
// the verified blob.
func (c *Cache) lookup(sum string) (string, bool, error) {
	for _, slot := range []string{sum[:12], sum} {
		p := filepath.Join(c.dir, slot)
		if readSum(p+".sha256") != sum {
			continue
		}
		st, err := os.Lstat(p)
		if err != nil || !st.IsDir() {
			continue
		}
		if sub := c.adoptedSub(slot); sub != "" {
			return filepath.Join(p, sub), true, nil // an adopted tree (Adopt)
		}
		if _, err := os.Lstat(p + imageSuffix); errors.Is(err, fs.ErrNotExist) {
			return p, true, nil // an unpacked layer
		}
		if mounted(p) {
			return p, true, nil
		}
		err = c.verifyAndMount(slot)
		if errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			if err := c.drop(slot); err != nil {
				return "", false, err
			}
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return p, true, nil
	}
	return "", false, nil
}

// verifyAndMount checks slot's image against its recorded digest
// (erofs.Digest: every byte of the image) and
// mounts it. A mismatch (a torn write after a crash, a disk error, a
// change by anyone but this cache) is errdefs.InvalidArgument, and the
// image is not mounted.
func (c *Cache) verifyAndMount(slot string) error {
	p := filepath.Join(c.dir, slot)
	want := readSum(p + imageSumSuffix)
	f, err := os.Open(p + imageSuffix)
	if err != nil {
		return errdefs.InvalidArgument("snapshot layer image %s: %w", slot, err)
	}
	got, err := imageDigest(f)
	f.Close()
	if err != nil {
		return errdefs.InvalidArgument("snapshot layer image %s cannot be verified: %w", slot, err)
	}
	if want == "" || got != want {
		return errdefs.InvalidArgument("snapshot layer image %s is corrupt: sha256 %s, recorded %q; refusing to mount it", slot, got, want)
	}
	return mountImage(p+imageSuffix, p)
}

// freeSlot picks the short slot unless another digest holds it.
func (c *Cache) freeSlot(sum string) string {
	if s := readSum(filepath.Join(c.dir, sum[:12]+".sha256")); s != "" && s != sum {
		return sum
	}
	return sum[:12]
}

func (c *Cache) ref(id, sum string) error {
	d := filepath.Join(c.dir, ".ids")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	if readSum(filepath.Join(d, id)) == sum {
		return nil
	}
	return writeFileSync(filepath.Join(d, id), sum)
}

func (c *Cache) lock(key string) func() {
	c.mu.Lock()
	l := c.locks[key]
	if l == nil {
		l = &keyLock{}
		c.locks[key] = l
	}
	l.refs++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.locks, key)
		}
		c.mu.Unlock()
	}
}

// capReader fails once more than max bytes are read: the compression-bomb
// guard. It keeps its error so Layer can report it as what it is.
type capReader struct {
	r          io.Reader
	n, max     int64
	compressed int64
	id         string
	err        error
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		c.err = errdefs.ResourceExhausted("snapshot %s expands past %d bytes from a %d-byte blob; refused as a compression bomb", c.id, c.max, c.compressed)
		return 0, c.err
	}
	if err != nil && err != io.EOF {
		c.err = errdefs.InvalidArgument("snapshot %s is corrupt: %w", c.id, err)
		return n, c.err
	}
	return n, err
}

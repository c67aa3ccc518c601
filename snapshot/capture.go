package snapshot

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"runtime"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Limits bound what a snapshot layer may decompress to. Restore (Cache)
// refuses a blob past them before writing anything, and Capture refuses to
// produce one, so a snapshot that was taken can always be restored.
// Zero values mean the defaults.
type Limits struct {
	// MaxUncompressedBytes caps the tar stream (default 64 GiB, the same
	// as image.DefaultMaxTotalBytes).
	MaxUncompressedBytes int64
	// MaxRatio caps uncompressed/compressed once the stream is past
	// RatioFloor (defaults 1000 and 1 GiB). Real workspaces compress
	// 2-10x; a 1000:1 stream is a bomb (checklist #10), or a huge sparse
	// file, which a tar layer cannot keep sparse in transit anyway.
	MaxRatio   int64
	RatioFloor int64
	// MaxEntries caps tar entries (default image.DefaultMaxEntries).
	MaxEntries int64
}

// Default limits.
const (
	DefaultMaxUncompressedBytes = image.DefaultMaxTotalBytes
	DefaultMaxRatio             = 1000
	DefaultRatioFloor           = 1 << 30
	DefaultMaxDepth             = 256
)

func (l Limits) withDefaults() Limits {
	if l.MaxUncompressedBytes <= 0 {
		l.MaxUncompressedBytes = DefaultMaxUncompressedBytes
	}
	if l.MaxRatio <= 0 {
		l.MaxRatio = DefaultMaxRatio
	}
	if l.RatioFloor <= 0 {
		l.RatioFloor = DefaultRatioFloor
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = image.DefaultMaxEntries
	}
	return l
}

// maxFor is how many uncompressed bytes a blob of compressed bytes may
// expand to.
func (l Limits) maxFor(compressed int64) int64 {
	byRatio := l.RatioFloor
	if compressed > 0 && compressed <= (1<<62)/l.MaxRatio {
		byRatio = max(byRatio, compressed*l.MaxRatio)
	}
	return min(l.MaxUncompressedBytes, byRatio)
}

// CaptureOptions configures Capture and Squash. Zero values mean defaults.
type CaptureOptions struct {
	// Level is the zstd level (1 fastest ... 22 smallest); 0 means 1.
	// Snapshots are on the hot path and read once per host, so fast wins.
	Level int
	// MaxEntries caps the number of tar entries (default Limits.MaxEntries).
	MaxEntries int64
	// MaxDepth caps directory nesting (default 256). It also bounds the
	// fds held open by the walk (one per level per layer).
	MaxDepth int
	// Limits are the restore limits the result must respect.
	Limits Limits
}

func (o CaptureOptions) withDefaults() CaptureOptions {
	o.Limits = o.Limits.withDefaults()
	if o.Level <= 0 {
		o.Level = 1
	}
	if o.MaxEntries <= 0 || o.MaxEntries > o.Limits.MaxEntries {
		o.MaxEntries = o.Limits.MaxEntries
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	return o
}

// CaptureStats describes a written layer.
type CaptureStats struct {
	Files             int64  // tar entries (files, dirs, links, whiteouts)
	Skipped           int64  // sockets and device nodes, which no layer carries
	UncompressedBytes int64  // bytes of the tar stream
	CompressedBytes   int64  // bytes written to w
	SHA256            string // hex digest of the bytes written to w
}

// Capture writes the OCI-layer form of an overlay upper dir as tar+zstd to
// w. Overlay whiteouts (char dev 0:0) become `.wh.<name>` entries; opaque
// dirs (trusted.overlay.opaque=y) get a `.wh..wh..opq` entry. It never
// follows symlinks, keeps uid/gid/mode (setuid included) and nanosecond
// mtimes, writes hardlinks within the tree as tar hardlinks, and bounds
// depth, entries and size. Extended attributes are not carried (restore
// drops them anyway: security.capability would be a privilege gain).
//
// upperDir must not change while Capture runs: pass a frozen copy
// (rootfs.Manager.SnapshotUpper) or the upper of a stopped sandbox. A file
// that changes type or shrinks mid-walk fails the capture rather than
// producing a torn layer. On any error, what was written to w is not a
// usable layer and must be discarded.
func Capture(ctx context.Context, upperDir string, w io.Writer, opts CaptureOptions) (CaptureStats, error) {
	return write(ctx, []string{upperDir}, w, opts)
}

// Squash merges a chain of layer dirs (lowest first, each in overlay form
// as image.Unpack or overlay itself writes them: whiteouts are 0:0 char
// devices, opaque dirs carry the xattr; an upper dir may be the last
// element) into ONE tar+zstd layer equivalent to applying them in order
// over the base image. Whiteouts are kept (they may hide base-image files);
// a directory that any chain layer replaced, deleted or made opaque comes
// out opaque, so the base's version of it stays hidden.
func Squash(ctx context.Context, layers []string, w io.Writer, opts CaptureOptions) (CaptureStats, error) {
	if len(layers) == 0 {
		return CaptureStats{}, errdefs.InvalidArgument("squash needs at least one layer")
	}
	return write(ctx, layers, w, opts)
}

func write(ctx context.Context, layers []string, w io.Writer, opts CaptureOptions) (CaptureStats, error) {
	opts = opts.withDefaults()
	fds := make([]int, 0, len(layers))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := len(layers) - 1; i >= 0; i-- { // top first
		fd, err := unix.Open(layers[i], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return CaptureStats{}, fmt.Errorf("snapshot: open layer %s: %w", layers[i], err)
		}
		fds = append(fds, fd)
	}

	out := &hashCount{w: w, h: sha256.New()}
	enc, err := zstd.NewWriter(out,
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(opts.Level)),
		zstd.WithEncoderConcurrency(encoderConcurrency()))
	if err != nil {
		return CaptureStats{}, err
	}
	raw := &limitCount{w: enc, max: opts.Limits.MaxUncompressedBytes}
	wk := &walker{
		ctx:   ctx,
		tw:    tar.NewWriter(raw),
		opts:  opts,
		links: map[devIno]string{},
		buf:   make([]byte, 256<<10),
	}
	if len(layers) == 1 {
		wk.pre = newPrefetcher()
		defer wk.pre.close()
	}
	err = wk.dir("", fds, 0)
	if err == nil {
		err = wk.tw.Close()
	}
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	if raw.err != nil {
		err = raw.err // the cap, not the tar writer's wrapping of it
	}
	if err != nil {
		return CaptureStats{}, fmt.Errorf("snapshot: %w", err)
	}
	st := CaptureStats{
		Files:             wk.entries,
		Skipped:           wk.skipped,
		UncompressedBytes: raw.n,
		CompressedBytes:   out.n,
		SHA256:            hex.EncodeToString(out.h.Sum(nil)),
	}
	if lim := opts.Limits.maxFor(out.n); raw.n > lim {
		return st, errdefs.ResourceExhausted("snapshot: the layer expands %d bytes to %d (over %d:1); restore would refuse it as a compression bomb (huge sparse or repetitive files?)", out.n, raw.n, opts.Limits.MaxRatio)
	}
	return st, nil
}

// hashCount counts and hashes what passes to w.
type hashCount struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (c *hashCount) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// limitCount counts bytes and fails once more than max pass.
type limitCount struct {
	w   io.Writer
	n   int64
	max int64
	err error
}

func (c *limitCount) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		c.err = errdefs.ResourceExhausted("snapshot is over %d bytes uncompressed", c.max)
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encoderConcurrency is the zstd encoder's goroutine count. On two cores
// or fewer, one: the block is encoded inside the writer's own Write. With
// two (the earlier setting) each block was handed to a second goroutine,
// which on the 2-core dev host measured slower in every interleaved pair
// (BenchmarkCapture -benchtime 3x, load 11-48: 1.01, 1.01, 1.66, 1.62,
// 1.29 s against 1.41, 1.21, 4.98, 3.82, 1.40 s; tar | zstd -1 of the
// tree 0.88-1.62 s).
// Above two cores, two as before (not measured here).
func encoderConcurrency() int {
	if runtime.GOMAXPROCS(0) <= 2 {
		return 1
	}
	return 2
}

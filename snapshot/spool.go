package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// memSpoolMax is the largest blob spooled in memory; a bigger one moves to
// an unnamed file in the cache dir. Writing the spool to disk cost a fifth
// of a cold restore of a 200 MB workspace.
var memSpoolMax int64 = 512 << 20

// spool copies the blob into an unnamed file and returns it rewound, only
// if its sha256 is sum. The file is a memfd while the blob is at most
// memSpoolMax bytes, else an O_TMPFILE in the cache dir (nothing appears in
// the directory, and the space is freed by close).
func (c *Cache) spool(ctx context.Context, id, sum string, open func(ctx context.Context) (io.ReadCloser, error)) (*os.File, error) {
	fd, err := unix.MemfdCreate("snapshot-blob", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("snapshot cache: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "snapshot-blob")
	rc, err := open(ctx)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot %s: open blob: %w", id, err)
	}
	defer rc.Close()
	// A compressed stream is never much larger than what it expands to.
	maxBlob := c.limits.MaxUncompressedBytes + c.limits.MaxUncompressedBytes/64 + 1<<20
	h := sha256.New()
	src := io.LimitReader(ctxReader{ctx, rc}, maxBlob+1)
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(src, memSpoolMax+1))
	if err == nil && n > memSpoolMax {
		var disk *os.File
		if disk, err = c.toDisk(f); err == nil {
			f.Close()
			f = disk
			var m int64
			m, err = io.Copy(io.MultiWriter(f, h), src)
			n += m
		}
	}
	if err == nil && n > maxBlob {
		err = errdefs.ResourceExhausted("snapshot %s blob is over %d bytes", id, maxBlob)
	}
	if err == nil && hex.EncodeToString(h.Sum(nil)) != sum {
		err = errdefs.InvalidArgument("snapshot %s is corrupt: sha256 mismatch (blob of %d bytes is truncated or was modified)", id, n)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		var typed *errdefs.Error
		if !errors.As(err, &typed) {
			err = fmt.Errorf("snapshot %s: read blob: %w", id, err)
		}
		return nil, err
	}
	return f, nil
}

// toDisk copies the memory spool mem into an unnamed file in the cache dir
// and returns that file, positioned at its end.
func (c *Cache) toDisk(mem *os.File) (*os.File, error) {
	fd, err := unix.Open(c.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("snapshot cache: temp file: %w", err)
	}
	disk := os.NewFile(uintptr(fd), "snapshot-blob")
	if _, err := mem.Seek(0, io.SeekStart); err != nil {
		disk.Close()
		return nil, err
	}
	if _, err := io.Copy(disk, mem); err != nil {
		disk.Close()
		return nil, fmt.Errorf("snapshot cache: spool to disk: %w", err)
	}
	return disk, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

package image

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// layerID names an unpacked layer: 16 hex digits of its diffid keep the
// overlayfs lowerdir= option (one page) short even with many layers.
func layerID(diffID string) string {
	h := strings.TrimPrefix(diffID, "sha256:")
	if len(h) > 16 {
		h = h[:16]
	}
	return h
}

func (s *Store) layerDir(id string) string { return filepath.Join(s.root, "l", id) }

func (s *Store) layerLock(id string) *sync.Mutex {
	s.layerMu.Lock()
	defer s.layerMu.Unlock()
	m := s.layers[id]
	if m == nil {
		m = &sync.Mutex{}
		s.layers[id] = m
	}
	return m
}

// LayerDirs returns the unpacked read-only directories of img, LOWEST
// FIRST, unpacking any that are missing. Each layer is unpacked once per
// host: under a per-layer lock, into a temp dir, then renamed into place,
// so a crash never leaves a half-unpacked layer that looks complete.
func (s *Store) LayerDirs(ctx context.Context, img *Image) ([]string, error) {
	if len(img.DiffIDs) != len(img.Layers) {
		// An Image built by hand: use the recorded one.
		rec, err := s.Resolve(ctx, img.Digest)
		if err != nil {
			return nil, err
		}
		img = rec
	}
	dirs := make([]string, len(img.Layers))
	for i := range img.Layers {
		d, err := s.ensureLayer(ctx, img.Layers[i], img.DiffIDs[i])
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, img.Layers[i], err)
		}
		dirs[i] = d
	}
	return dirs, nil
}

func (s *Store) ensureLayer(ctx context.Context, blob, diffID string) (string, error) {
	id := layerID(diffID)
	dir := s.layerDir(id)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	m := s.layerLock(id)
	m.Lock()
	defer m.Unlock()
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "layer-"+id+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	f, err := os.Open(s.blobPath(blob))
	if err != nil {
		return "", errdefs.NotFound("layer blob %s missing from the image store: %w", blob, err)
	}
	defer f.Close()
	if err := unpackCompressed(ctx, f, tmp, diffID); err != nil {
		return "", err
	}
	// Flush the unpacked files before the rename publishes them, so a
	// power loss cannot leave a complete-looking layer with empty files.
	if err := syncFS(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

// unpackCompressed decompresses r (gzip, zstd, bzip2 or plain tar, by magic
// bytes, not by the media type a registry claims), unpacks it into dst and,
// if diffID is set, checks the uncompressed stream hashes to it. That check
// is what protects `docker save` layers, which carry no compressed digest.
func unpackCompressed(ctx context.Context, r io.Reader, dst, diffID string) error {
	tr, closeFn, err := decompress(r)
	if err != nil {
		return err
	}
	defer closeFn()
	h := sha256.New()
	tee := io.TeeReader(tr, h)
	if err := Unpack(ctx, tee, dst, UnpackOptions{SkipDevices: true}); err != nil {
		return err
	}
	// The tar reader stops at the end-of-archive marker; the digest covers
	// the whole stream including padding.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return errdefs.InvalidArgument("layer stream: %w", err)
	}
	if diffID != "" {
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
			return errdefs.InvalidArgument("layer content digest mismatch: expected diff id %s, got %s (corrupt or tampered layer)", diffID, got)
		}
	}
	return nil
}

var (
	gzipMagic  = []byte{0x1f, 0x8b}
	zstdMagic  = []byte{0x28, 0xb5, 0x2f, 0xfd}
	bzip2Magic = []byte("BZh")
)

func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 1<<20)
	head, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, errdefs.InvalidArgument("bad gzip layer: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(1<<27))
		if err != nil {
			return nil, nil, errdefs.InvalidArgument("bad zstd layer: %w", err)
		}
		return zr, zr.Close, nil
	case bytes.HasPrefix(head, bzip2Magic):
		return bzip2.NewReader(br), func() {}, nil
	default:
		return br, func() {}, nil
	}
}

// isCompressed reports whether the stream starts with a known compression
// magic (the rest of r is returned unconsumed via the returned reader).
func isCompressed(r io.Reader) (bool, io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, nil, err
	}
	c := bytes.HasPrefix(head, gzipMagic) || bytes.HasPrefix(head, zstdMagic) || bytes.HasPrefix(head, bzip2Magic)
	return c, br, nil
}

// removeLayerDir deletes an unpacked layer: first renamed away so that it
// never looks complete while half deleted.
func (s *Store) removeLayerDir(id string) {
	m := s.layerLock(id)
	m.Lock()
	defer m.Unlock()
	trash, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "rm-")
	if err != nil {
		return
	}
	if err := os.Rename(s.layerDir(id), filepath.Join(trash, "l")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return
	}
	os.RemoveAll(trash)
}

func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

package fs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/blob/internal/check"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	blobsDir = "blobs"
	tmpDir   = "tmp"
	suffix   = ".blob~"

	magic     = "BERTHBL\x01"
	headerLen = 8 + 8 + sha256.Size
)

// Store is a blob.Store on a local directory.
type Store struct {
	dir  string
	root *os.Root
	lock *os.File // holds the flock for the Store's lifetime
}

var _ blob.Store = (*Store)(nil)

// New opens (creating if needed) a store in dir and removes temp files
// left by Puts that a crash interrupted.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, mapErr(err))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, mapErr(err))
	}
	// One Store per directory: New empties tmp/, which would destroy the
	// uploads in flight of a second daemon on the same directory.
	lock, err := root.OpenFile("lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("blob store %s: %w", dir, mapErr(err))
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		root.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errdefs.FailedPrecondition("blob store %s is already open (by this or another process)", dir)
		}
		return nil, fmt.Errorf("blob store %s: locking: %w", dir, mapErr(err))
	}
	s := &Store{dir: dir, root: root, lock: lock}
	if err := s.init(); err != nil {
		s.Close()
		return nil, fmt.Errorf("blob store %s: %w", dir, mapErr(err))
	}
	return s, nil
}

func (s *Store) init() error {
	if err := s.root.MkdirAll(blobsDir, 0o700); err != nil {
		return err
	}
	// The lock guarantees no other Store writes tmp/, so anything there
	// now is debris from a crashed run.
	if err := s.root.RemoveAll(tmpDir); err != nil {
		return fmt.Errorf("cleaning temp files: %w", err)
	}
	return s.root.Mkdir(tmpDir, 0o700)
}

// Close releases the store's directory handle and lock.
func (s *Store) Close() error {
	s.lock.Close()
	return s.root.Close()
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func dataPath(key string) string { return blobsDir + "/" + key + suffix }

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, wantSHA256 string) (blob.Info, error) {
	if err := check.Key(key); err != nil {
		return blob.Info{}, err
	}
	if wantSHA256 != "" {
		if err := check.Digest(wantSHA256); err != nil {
			return blob.Info{}, err
		}
	}
	tmp, f, err := s.createTemp()
	if err != nil {
		return blob.Info{}, err
	}
	published := false
	defer func() {
		if !published {
			f.Close()
			s.root.Remove(tmp)
		}
	}()

	// Reserve the header; it is filled in once the digest is known.
	if _, err := f.Write(make([]byte, headerLen)); err != nil {
		return blob.Info{}, s.writeErr(key, err)
	}
	src := &srcReader{r: ctxReader{ctx, r}}
	h := check.NewHasher(src)
	if _, err := io.Copy(f, h); err != nil {
		if src.err != nil && err == src.err {
			return blob.Info{}, fmt.Errorf("put blob %s: reading content: %w", key, err)
		}
		return blob.Info{}, s.writeErr(key, err)
	}
	info := blob.Info{Key: key, Size: h.N, SHA256: h.Sum()}
	if wantSHA256 != "" && info.SHA256 != wantSHA256 {
		return blob.Info{}, errdefs.InvalidArgument("put blob %s: content sha256 is %s, want %s; nothing was stored", key, info.SHA256, wantSHA256)
	}
	if _, err := f.WriteAt(encodeHeader(info), 0); err != nil {
		return blob.Info{}, s.writeErr(key, err)
	}
	// fsync before rename: otherwise a crash can publish the name with
	// the data still unwritten (the ext4 zero-length-file problem).
	if err := f.Sync(); err != nil {
		return blob.Info{}, s.writeErr(key, err)
	}
	if err := f.Close(); err != nil {
		return blob.Info{}, s.writeErr(key, err)
	}
	if err := ctx.Err(); err != nil {
		return blob.Info{}, err
	}
	if err := s.publish(tmp, key); err != nil {
		return blob.Info{}, err
	}
	published = true
	return info, nil
}

// publish renames tmp onto key's data file. A concurrent Delete may prune
// the parent directory between MkdirAll and Rename, so ENOENT is retried.
func (s *Store) publish(tmp, key string) error {
	dst := dataPath(key)
	dir := path.Dir(dst)
	var err error
	for range 5 {
		if err = s.root.MkdirAll(dir, 0o700); err != nil {
			if errors.Is(err, syscall.ENOTDIR) {
				return errdefs.FailedPrecondition("put blob %s: a path component is not a directory in %s", key, s.dir)
			}
			return s.writeErr(key, err)
		}
		if err = s.root.Rename(tmp, dst); err == nil {
			break
		}
		if !errors.Is(err, iofs.ErrNotExist) {
			return s.writeErr(key, err)
		}
	}
	if err != nil {
		return s.writeErr(key, err)
	}
	// Make the rename (and any new directories) durable.
	for d := dir; ; d = path.Dir(d) {
		if err := s.syncDir(d); err != nil {
			return s.writeErr(key, err)
		}
		if d == blobsDir {
			break
		}
	}
	return nil
}

func (s *Store) syncDir(d string) error {
	f, err := s.root.Open(d)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (s *Store) createTemp() (string, *os.File, error) {
	for range 10 {
		var b [12]byte
		rand.Read(b[:])
		name := tmpDir + "/" + hex.EncodeToString(b[:])
		f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, iofs.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("blob store %s: creating temp file: %w", s.dir, mapErr(err))
		}
		return name, f, nil
	}
	return "", nil, errdefs.Internal("blob store %s: could not create a unique temp file", s.dir)
}

// Get implements blob.Store. The returned reader re-hashes the content and
// returns an error instead of EOF when it does not match.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := check.Key(key); err != nil {
		return nil, blob.Info{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return nil, blob.Info{}, err
	}
	rc := readCloser{ctxReader{ctx, f}, f}
	return check.NewReader(rc, key, info.Size, info.SHA256), info, nil
}

// Stat implements blob.Store; it reads only the header.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := check.Key(key); err != nil {
		return blob.Info{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return blob.Info{}, err
	}
	f.Close()
	return info, nil
}

// open opens key's data file positioned after the header.
func (s *Store) open(key string) (*os.File, blob.Info, error) {
	f, err := s.root.Open(dataPath(key))
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, blob.Info{}, errdefs.NotFound("blob %s not found", key)
		}
		return nil, blob.Info{}, fmt.Errorf("open blob %s: %w", key, mapErr(err))
	}
	info, err := readHeader(f, key)
	if err != nil {
		f.Close()
		return nil, blob.Info{}, err
	}
	return f, info, nil
}

func readHeader(f *os.File, key string) (blob.Info, error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return blob.Info{}, check.Corrupt(key, "header unreadable: "+err.Error())
	}
	if string(hdr[:8]) != magic {
		return blob.Info{}, check.Corrupt(key, "bad header magic")
	}
	size := binary.BigEndian.Uint64(hdr[8:16])
	st, err := f.Stat()
	if err != nil {
		return blob.Info{}, fmt.Errorf("stat blob %s: %w", key, mapErr(err))
	}
	if size > uint64(st.Size()) || uint64(st.Size())-headerLen != size {
		return blob.Info{}, check.Corrupt(key, fmt.Sprintf("file holds %d bytes, header records %d", st.Size()-headerLen, size))
	}
	return blob.Info{Key: key, Size: int64(size), SHA256: hex.EncodeToString(hdr[16:])}, nil
}

func encodeHeader(info blob.Info) []byte {
	hdr := make([]byte, headerLen)
	copy(hdr, magic)
	binary.BigEndian.PutUint64(hdr[8:16], uint64(info.Size))
	sum, _ := hex.DecodeString(info.SHA256)
	copy(hdr[16:], sum)
	return hdr
}

// Delete implements blob.Store and prunes directories it leaves empty.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := check.Key(key); err != nil {
		return err
	}
	err := s.root.Remove(dataPath(key))
	if err != nil && !errors.Is(err, iofs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("delete blob %s: %w", key, mapErr(err))
	}
	// rmdir fails on a non-empty directory, which is what stops the walk.
	for d := path.Dir(dataPath(key)); d != blobsDir; d = path.Dir(d) {
		if s.root.Remove(d) != nil {
			break
		}
	}
	return nil
}

// List implements blob.Store. Headers are read, content is not.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := check.Prefix(prefix); err != nil {
		return nil, err
	}
	// Walk only the deepest directory the prefix names completely.
	start := blobsDir
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = blobsDir + "/" + prefix[:i]
	}
	var out []blob.Info
	err := iofs.WalkDir(s.root.FS(), start, func(p string, d iofs.DirEntry, err error) error {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil // the prefix names nothing, or a Delete pruned a directory mid-walk
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, suffix) {
			return nil
		}
		key := strings.TrimSuffix(strings.TrimPrefix(p, blobsDir+"/"), suffix)
		if !strings.HasPrefix(key, prefix) || check.Key(key) != nil {
			return nil
		}
		f, info, err := s.open(key)
		if errdefs.Code(err) == "not_found" {
			return nil // deleted since the directory was read
		}
		if err != nil {
			return err
		}
		f.Close()
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list blobs %q: %w", prefix, mapErr(err))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *Store) writeErr(key string, err error) error {
	return fmt.Errorf("put blob %s: %w", key, s.mapDirErr(err))
}

func (s *Store) mapDirErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errdefs.ResourceExhausted("blob store %s is full (%w); nothing was stored", s.dir, err)
	}
	return mapErr(err)
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errdefs.ResourceExhausted("no space left: %w", err)
	case errors.Is(err, iofs.ErrPermission), errors.Is(err, syscall.EROFS):
		return errdefs.PermissionDenied("%w", err)
	case errors.Is(err, iofs.ErrNotExist):
		return errdefs.NotFound("%w", err)
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return err
	}
	return errdefs.Internal("%w", err)
}

// ctxReader stops a long copy when ctx is cancelled.
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

// srcReader remembers the caller's read error so Put can tell "your
// reader failed" from "the disk failed".
type srcReader struct {
	r   io.Reader
	err error
}

func (s *srcReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

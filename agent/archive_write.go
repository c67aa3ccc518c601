package agent

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxDrainAfterError bounds how much of a refused upload the agent still
// reads so that the host gets the error answer instead of a reset
// connection (a client still sending may miss an early response).
const maxDrainAfterError = 16 << 20

// restoreMu serializes the swap of a staging directory into place, so two
// restores of one directory cannot interleave their renames.
var restoreMu sync.Mutex

// handleWriteArchive restores a tar into DIR all or nothing: the tar is
// unpacked into a new staging directory beside DIR (same filesystem), and
// only a complete, valid archive is swapped into place. On any error the
// staging directory is removed and DIR is untouched.
func (s *Server) handleWriteArchive(w http.ResponseWriter, r *http.Request) {
	res, err := s.restore(r)
	if err != nil {
		io.Copy(io.Discard, io.LimitReader(r.Body, maxDrainAfterError))
		httpio.WriteError(w, err)
		return
	}
	httpio.WriteJSON(w, http.StatusOK, res)
}

func (s *Server) restore(r *http.Request) (wire.ArchiveResult, error) {
	dir, err := s.pathParam(r, "path")
	if err != nil {
		return wire.ArchiveResult{}, err
	}
	q := r.URL.Query()
	acct, err := s.resolveUser(q.Get("user"))
	if err != nil {
		return wire.ArchiveResult{}, err
	}
	po := q.Get("preserveOwner")
	preserve := po == "1" || po == "true"
	if dir == "/" {
		return wire.ArchiveResult{}, errdefs.InvalidArgument("restore: refusing to replace /")
	}
	// A DIR that is a symlink is resolved (inside the sandbox) so the
	// directory it names is replaced, not the link.
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return wire.ArchiveResult{}, fspath.Error("restore", dir, err)
		}
		dir = real
	}
	exists := false
	if fi, err := os.Lstat(dir); err == nil {
		if !fi.IsDir() {
			return wire.ArchiveResult{}, errdefs.InvalidArgument("restore %s: exists and is not a directory", dir)
		}
		exists = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return wire.ArchiveResult{}, fspath.Error("restore", dir, err)
	}
	parent := filepath.Dir(dir)
	made, err := mkdirParents(parent, acct)
	if err != nil {
		return wire.ArchiveResult{}, fspath.Error("restore", parent, err)
	}
	committed := false
	defer func() {
		if !committed {
			for i := len(made) - 1; i >= 0; i-- {
				os.Remove(made[i])
			}
		}
	}()
	var rnd [8]byte
	rand.Read(rnd[:])
	staging := filepath.Join(parent, fspath.StagingPrefix+hex.EncodeToString(rnd[:]))
	if err := os.Mkdir(staging, 0o700); err != nil {
		return wire.ArchiveResult{}, fspath.Error("restore", dir, err)
	}
	defer func() {
		if !committed {
			os.RemoveAll(staging)
		}
	}()
	res, err := extractInto(r, staging, acct, preserve)
	if err != nil {
		return wire.ArchiveResult{}, err
	}
	// The body must also end cleanly after the tar's end marker: the host
	// checks the backup blob's digest as it streams and fails the body at
	// its very end when the bytes were tampered with. Committing before
	// that would swap in a tampered tree.
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxDrainAfterError)); err != nil {
		return wire.ArchiveResult{}, errdefs.InvalidArgument("restore %s: the upload failed after the archive: %w", dir, err)
	}
	// Make the new tree durable before it replaces the old one, so a
	// crash after the swap cannot leave empty files under DIR.
	if fd, err := unix.Open(staging, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
	old, err := swapInto(staging, dir, exists)
	if err != nil {
		return wire.ArchiveResult{}, fspath.Error("restore", dir, err)
	}
	committed = true
	syncDir(parent)
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			s.cfg.Logf("agent: restore %s: removing the previous tree at %s: %v", dir, old, err)
		}
	}
	return res, nil
}

// extractInto unpacks the request body into staging.
func extractInto(r *http.Request, staging string, acct account, preserve bool) (wire.ArchiveResult, error) {
	var efs extractFS
	if extractNoRoot {
		efs = plainFS{base: staging}
	} else {
		root, err := os.OpenRoot(staging)
		if err != nil {
			return wire.ArchiveResult{}, fspath.Error("restore", staging, err)
		}
		defer root.Close()
		efs = rootFS{root}
	}
	ex := newExtractor(efs, acct, preserve)
	body := &markerReader{r: r.Body}
	tr := tar.NewReader(body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			if body.emptyEOF {
				return wire.ArchiveResult{}, errdefs.InvalidArgument("restore: archive is truncated (it ends without the end-of-archive marker)")
			}
			break
		}
		if err == nil {
			err = ex.entry(r.Context(), h, tr)
		}
		if err != nil {
			return wire.ArchiveResult{}, archiveError(err, body, h)
		}
	}
	if err := ex.finish(); err != nil {
		return wire.ArchiveResult{}, fspath.Error("restore", ".", err)
	}
	return ex.res, nil
}

// archiveError explains why a restore stopped.
func archiveError(err error, body *markerReader, h *tar.Header) error {
	if body.err != nil {
		return errdefs.Unavailable("restore: upload interrupted: %w", body.err)
	}
	if errdefs.Code(err) != "internal" {
		return err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errdefs.InvalidArgument("restore: archive is truncated")
	}
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong) {
		return errdefs.InvalidArgument("restore: archive is corrupt: %w", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errdefs.Unavailable("restore: the host went away: %w", err)
	}
	name := "archive"
	if h != nil {
		name = h.Name
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fspath.Error("restore", name, err)
	}
	// os.Root refuses a name that resolves outside the staging root
	// (through "..", an absolute link or a planted symlink) with
	// errPathEscapes.
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Err == errPathEscapes() {
		return hostile(name, "it resolves outside the restored tree")
	}
	return fmt.Errorf("restore %s: %w", name, err)
}

// errPathEscapes is os.Root's error for a name that resolves outside the
// root. The os package does not export it, so it is taken once from os.Root
// itself (a lexical "..", which opens nothing) and compared by identity, not
// by its text.
var errPathEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return nil
	}
	defer r.Close()
	var pe *os.PathError
	if _, err := r.Lstat("../x"); errors.As(err, &pe) {
		return pe.Err
	}
	return nil
})

// swapInto moves staging to dir. When dir exists the two are exchanged
// atomically (renameat2 RENAME_EXCHANGE), so DIR always names a complete
// tree, and the old tree (now at staging) is returned for removal. Where
// exchange is unsupported it falls back to rename aside, rename in.
func swapInto(staging, dir string, exists bool) (old string, err error) {
	restoreMu.Lock()
	defer restoreMu.Unlock()
	if !exists {
		err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
			err = os.Rename(staging, dir)
		}
		return "", err
	}
	err = unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if err == nil {
		return staging, nil
	}
	if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOSYS) {
		return "", err
	}
	aside := staging + "-old"
	if err := os.Rename(dir, aside); err != nil {
		return "", err
	}
	if err := os.Rename(staging, dir); err != nil {
		os.Rename(aside, dir) // put the old tree back
		return "", err
	}
	return aside, nil
}

// mkdirParents is mkdir -p for a restore target's parent, owned by acct;
// it returns the directories it made so a failed restore can remove them.
func mkdirParents(dir string, acct account) ([]string, error) {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return nil, &os.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || d == filepath.Dir(d) {
			return nil, err
		}
		missing = append(missing, d)
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := mkdirAllOwned(missing[i], 0o755, acct); err != nil {
			for j := len(made) - 1; j >= 0; j-- {
				os.Remove(made[j])
			}
			return nil, err
		}
		made = append(made, missing[i])
	}
	return made, nil
}

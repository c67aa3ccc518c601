package fspath

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/berth-sh/berth/internal/errdefs"
)

// UploadPrefix names the agent's staging file of a file write, beside its
// target. Watches never report such names.
const UploadPrefix = ".berth-upload-"

// StagingPrefix starts the name of the directory a restore unpacks into,
// beside its target. One left behind by a crashed agent can be removed.
// Watches never report such names.
const StagingPrefix = ".berth-restore-"

// Internal reports whether a slash-separated relative path has a component
// that is one of the agent's staging names.
func Internal(rel string) bool {
	for rel != "" {
		part, rest, _ := strings.Cut(rel, "/")
		if strings.HasPrefix(part, UploadPrefix) || strings.HasPrefix(part, StagingPrefix) {
			return true
		}
		rel = rest
	}
	return false
}

// MaxPath is PATH_MAX; longer paths are refused before any syscall.
const MaxPath = 4096

// Check rejects paths that no file API should accept: empty, longer
// than PATH_MAX, holding NUL (which would truncate the path at the syscall
// boundary) or not UTF-8 (checklist #7).
func Check(p string) error {
	switch {
	case p == "":
		return errdefs.InvalidArgument("path is empty")
	case len(p) > MaxPath:
		return errdefs.InvalidArgument("path is longer than %d bytes", MaxPath)
	case strings.IndexByte(p, 0) >= 0:
		return errdefs.InvalidArgument("path contains a NUL byte")
	case !utf8.ValidString(p):
		return errdefs.InvalidArgument("path is not valid UTF-8")
	}
	return nil
}

// Resolve validates p and makes it absolute: relative paths are relative
// to home. The result is lexically cleaned; symlinks are left to the kernel,
// which resolves them inside the sandbox's root.
func Resolve(p, home string) (string, error) {
	if err := Check(p); err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(home, p)
	}
	return filepath.Clean(p), nil
}

// Error turns a filesystem error into an errdefs kind with a message that
// names the path the user gave.
func Error(op, path string, err error) error {
	var errno syscall.Errno
	// An error that already has a kind keeps it, even if an errno lies in
	// its cause.
	if errdefs.Kind(err) != nil || !errors.As(err, &errno) {
		if errdefs.Code(err) != "internal" {
			return err
		}
		return fmt.Errorf("%s %s: %w", op, path, err)
	}
	switch errno {
	case syscall.ENOENT:
		return errdefs.NotFound("%s %s: no such file or directory", op, path)
	case syscall.EEXIST:
		return errdefs.AlreadyExists("%s %s: file exists", op, path)
	case syscall.ENOTDIR:
		return errdefs.InvalidArgument("%s %s: a path component is not a directory", op, path)
	case syscall.EISDIR:
		return errdefs.InvalidArgument("%s %s: is a directory", op, path)
	case syscall.EINVAL:
		return errdefs.InvalidArgument("%s %s: invalid argument", op, path)
	case syscall.ENAMETOOLONG:
		return errdefs.InvalidArgument("%s %s: file name too long", op, path)
	case syscall.ELOOP:
		return errdefs.InvalidArgument("%s %s: too many levels of symbolic links", op, path)
	case syscall.ENOTEMPTY:
		return errdefs.FailedPrecondition("%s %s: directory not empty", op, path)
	case syscall.EXDEV:
		return errdefs.FailedPrecondition("%s %s: cannot move across filesystems", op, path)
	case syscall.EBUSY:
		return errdefs.FailedPrecondition("%s %s: device or resource busy", op, path)
	case syscall.EACCES, syscall.EPERM:
		return errdefs.PermissionDenied("%s %s: permission denied", op, path)
	case syscall.EROFS:
		return errdefs.PermissionDenied("%s %s: read-only file system", op, path)
	case syscall.ENOSPC, syscall.EDQUOT:
		return errdefs.NoSpace("%s %s: no space left on device", op, path)
	}
	return errdefs.Internal("%s %s: %w", op, path, errno)
}

package image

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// inRoot is how every path under an unpack destination is resolved:
// RESOLVE_IN_ROOT treats the dirfd as "/" for "..", absolute symlinks and
// absolute names, so nothing can climb out of it (zip slip, symlink
// breakouts); NO_MAGICLINKS refuses /proc/self/fd-style jumps
// (CVE-2019-5736 class); NO_XDEV refuses crossing into another mount.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

func openInRoot(root int, rel string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: inRoot}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a concurrent rename somewhere on the system
		}
		return fd, err
	}
}

// resolveDir returns an O_PATH fd for directory rel under root. With
// create, missing components are made (0755, root-owned; a later tar entry
// for the directory sets its real metadata). Each step is resolved again
// from root, so every mkdirat happens in a directory already proven to be
// inside root.
func resolveDir(root int, rel string, create bool) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY
	fd, err := openInRoot(root, rel, flags)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return -1, fmt.Errorf("resolve %q: %w", rel, err)
		}
		return fd, nil
	}
	cur, err := openInRoot(root, ".", flags)
	if err != nil {
		return -1, err
	}
	prefix := ""
	for _, comp := range strings.Split(rel, "/") {
		if prefix == "" {
			prefix = comp
		} else {
			prefix += "/" + comp
		}
		next, err := openInRoot(root, prefix, flags)
		if errors.Is(err, unix.ENOENT) {
			// cur is the resolved parent; create comp in it, never
			// following an existing entry named comp.
			if merr := unix.Mkdirat(cur, comp, 0o755); merr != nil && !errors.Is(merr, unix.EEXIST) {
				unix.Close(cur)
				return -1, fmt.Errorf("mkdir %q: %w", prefix, merr)
			}
			next, err = openInRoot(root, prefix, flags)
		}
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("resolve %q: %w", prefix, err)
		}
		cur = next
	}
	return cur, nil
}

// replaceAt removes whatever is at name in dirfd (never following it) so a
// new entry can take its place.
func replaceAt(dirfd int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	return removeAllAt(dirfd, name)
}

// removeAllAt removes name under dirfd recursively using only fd-relative
// calls with O_NOFOLLOW, so a symlink inside the tree is unlinked, never
// traversed.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return err
	}
	for _, n := range names {
		if err := removeAllAt(fd, n); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

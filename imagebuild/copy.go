package imagebuild

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// COPY and ADD read from a hostile tree: the build context (a client's
// tar, symlinks and all) or another stage's filesystem (written by RUN
// steps). Every source path is resolved with openat2(RESOLVE_IN_ROOT) from
// a directory fd of that tree, so `..` and absolute symlinks can only lead
// back into it; below the named source nothing is followed (entries are
// read with *at calls and O_NOFOLLOW; symlinks are copied as symlinks, to
// be resolved only inside a sandbox). The destination is a private staging
// directory the builder made, turned into a layer afterwards.

const resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// owner is the uid/gid copied files get (COPY --chown; default 0:0).
type owner struct{ uid, gid int }

// copyOpts is one COPY/ADD's file treatment.
type copyOpts struct {
	own  owner
	mode os.FileMode // --chmod; 0 keeps the source's
}

// cleanSource turns a source path into a path relative to the tree root,
// refusing one that climbs out ("../../etc/shadow"), as docker does.
func cleanSource(src string) (string, error) {
	c := path.Clean("/" + src)
	if strings.Contains(src, "\x00") {
		return "", errdefs.InvalidArgument("source %q contains a NUL byte", src)
	}
	// Clean of "/"+src never climbs above "/"; climbing is visible in
	// the raw path.
	if rel := path.Clean(src); rel == ".." || strings.HasPrefix(rel, "../") {
		return "", errdefs.InvalidArgument("source %q is outside the build context", src)
	}
	return strings.TrimPrefix(c, "/"), nil
}

// openIn opens rel inside root (a dir fd), following symlinks only as if
// root were "/". rel "" is the root itself.
func openIn(root int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOCTTY), Resolve: resolveInRoot}
	for {
		fd, err := unix.Openat2(root, rel, &how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

// expandSources resolves a COPY/ADD source list against root: a "*", "?"
// or "[" in the last component matches names in its (in-root) directory.
func expandSources(root int, srcs []string) ([]string, error) {
	var out []string
	for _, s := range srcs {
		rel, err := cleanSource(s)
		if err != nil {
			return nil, err
		}
		dir, base := path.Split(rel)
		if strings.ContainsAny(dir, "*?[") {
			return nil, errdefs.InvalidArgument("source %q: wildcards are supported in the last path component only", s)
		}
		if !strings.ContainsAny(base, "*?[") {
			out = append(out, rel)
			continue
		}
		fd, err := openIn(root, strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return nil, errdefs.NotFound("source %q: %v", s, err)
		}
		f := os.NewFile(uintptr(fd), dir)
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return nil, err
		}
		n := 0
		for _, nm := range names {
			if ok, err := path.Match(base, nm); err != nil {
				return nil, errdefs.InvalidArgument("source %q: %v", s, err)
			} else if ok {
				out = append(out, dir+nm)
				n++
			}
		}
		if n == 0 {
			return nil, errdefs.NotFound("source %q matches no file", s)
		}
	}
	return out, nil
}

// copySource copies rel (inside root) to dst in the staging tree. A
// directory's contents go into dst; a file becomes dst.
func copySource(root int, rel, dst string, o copyOpts) error {
	fd, err := openIn(root, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errdefs.NotFound("source %q not found", "/"+rel)
		}
		return fmt.Errorf("open source %q: %w", "/"+rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		// A destination the stage already has (mirrored into staging)
		// keeps its owner and mode; a new one gets --chown and the
		// source's mode.
		if _, err := os.Lstat(dst); err != nil {
			if err := mkdirOwned(dst, &st, o); err != nil {
				return err
			}
		}
		return copyDirContents(fd, dst, o, 0)
	case unix.S_IFREG:
		return copyFile(fd, &st, dst, o)
	default:
		return errdefs.InvalidArgument("source %q is not a regular file or directory", "/"+rel)
	}
}

const maxCopyDepth = 256

func copyDirContents(dirfd int, dst string, o copyOpts, depth int) error {
	if depth > maxCopyDepth {
		return errdefs.InvalidArgument("source nests deeper than %d directories", maxCopyDepth)
	}
	dfd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dfd), dst)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, nm := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, nm, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		target := filepath.Join(dst, nm)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := unix.Openat(dirfd, nm, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = mkdirOwned(target, &st, o)
			if err == nil {
				err = copyDirContents(cfd, target, o, depth+1)
			}
			unix.Close(cfd)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			ffd, err := unix.Openat(dirfd, nm, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = copyFile(ffd, &st, target, o)
			unix.Close(ffd)
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(dirfd, nm, buf)
			if err != nil {
				return err
			}
			// Stored verbatim: it is resolved only inside a sandbox.
			if err := os.Symlink(string(buf[:n]), target); err != nil {
				return err
			}
			if err := os.Lchown(target, o.own.uid, o.own.gid); err != nil {
				return err
			}
		default:
			// Devices, sockets and FIFOs are not copied (no layer
			// carries them; the runtime provides /dev).
		}
	}
	return nil
}

func mkdirOwned(dst string, st *unix.Stat_t, o copyOpts) error {
	mode := os.FileMode(st.Mode & 0o7777)
	if o.mode != 0 {
		mode = o.mode
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dst, mode|modeBits(st.Mode)); err != nil {
		return err
	}
	if err := os.Lchown(dst, o.own.uid, o.own.gid); err != nil {
		return err
	}
	return nil
}

func modeBits(m uint32) os.FileMode {
	var out os.FileMode
	if m&unix.S_ISUID != 0 {
		out |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		out |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		out |= os.ModeSticky
	}
	return out
}

func copyFile(fd int, st *unix.Stat_t, dst string, o copyOpts) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	// The caller owns fd; read through a duplicate that src owns (an
	// *os.File closes its fd when collected).
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(dup), dst)
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = out.ReadFrom(readerOnly{src})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	mode := os.FileMode(st.Mode&0o777) | modeBits(st.Mode)
	if o.mode != 0 {
		mode = o.mode
	}
	if err := os.Lchown(dst, o.own.uid, o.own.gid); err != nil {
		return err
	}
	if err := os.Chmod(dst, mode); err != nil { // after chown, which clears setuid
		return err
	}
	mt := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
	return os.Chtimes(dst, mt, mt)
}

// readerOnly hides *os.File's WriterTo/fd so ReadFrom copies plainly
// (no sendfile/copy_file_range across the two trees).
type readerOnly struct{ f *os.File }

func (r readerOnly) Read(p []byte) (int, error) { return r.f.Read(p) }

// fixDirTimes sets every directory under root to a fixed mtime, so a layer
// made twice from the same sources has the same digest (the cache keys
// downstream steps by it).
func fixDirTimes(root string) error {
	epoch := time.Unix(0, 0)
	var dirs []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i], epoch, epoch); err != nil {
			return err
		}
	}
	return nil
}

// parseMode parses a --chmod octal mode.
func parseMode(s string) (os.FileMode, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, errdefs.InvalidArgument("bad mode %q", s)
	}
	m := os.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m, nil
}

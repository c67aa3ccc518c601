package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Default caps for Unpack. A layer past them is refused rather than allowed
// to fill the host disk (decompression bombs, huge sparse files: checklist
// item 10).
const (
	DefaultMaxEntries    = 5_000_000
	DefaultMaxFileSize   = 16 << 30
	DefaultMaxTotalBytes = 64 << 30
)

// OCI whiteout markers (image-spec layer.md) and their overlayfs form.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// UnpackOptions bounds what one tar stream may create. Zero values mean the
// defaults above.
type UnpackOptions struct {
	MaxEntries    int64 // number of tar headers
	MaxFileSize   int64 // bytes of one regular file
	MaxTotalBytes int64 // bytes of all regular files together
	// SkipDevices drops char/block device entries silently instead of
	// failing the unpack. Either way no device node is ever created (the
	// runtime provides /dev); only the 0:0 overlay whiteout is.
	SkipDevices bool
}

func (o UnpackOptions) withDefaults() UnpackOptions {
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = DefaultMaxFileSize
	}
	if o.MaxTotalBytes <= 0 {
		o.MaxTotalBytes = DefaultMaxTotalBytes
	}
	return o
}

// Unpack extracts the uncompressed tar stream r into the existing directory
// dst, converting OCI whiteouts to overlayfs form (`.wh.NAME` becomes a 0:0
// character device NAME, `.wh..wh..opq` sets trusted.overlay.opaque=y on its
// directory). It is meant for a fresh, private dst that nothing else
// modifies while it runs.
//
// Rules, because the stream is hostile:
//   - Names containing NUL are refused. A leading "/" is stripped (absolute
//     names are taken relative to dst, as docker and containerd do); a name
//     whose cleaned form climbs above dst ("../x", "a/../../x") is refused.
//   - Parent directories are resolved with openat2(RESOLVE_IN_ROOT) from a
//     dst fd: symlinks already unpacked are followed as if dst were "/",
//     so `e -> /etc` then `e/passwd` writes dst/etc/passwd and never the
//     host's. The last component is never followed (O_NOFOLLOW, *at calls
//     with AT_SYMLINK_NOFOLLOW, linkat without AT_SYMLINK_FOLLOW).
//   - Hardlink targets are resolved the same way, so a link to /etc/shadow
//     or through a symlinked directory can only name a file inside dst.
//   - Symlink targets are stored verbatim: they are only ever resolved
//     inside the sandbox's own mount namespace.
//   - Char/block devices are refused (or skipped, see SkipDevices); a 0:0
//     char device is accepted since it is the overlay whiteout itself.
//     FIFOs are created.
//   - Whiteouts of "", "." or ".." are refused; whiteouts are created
//     inside dst only.
//   - uid/gid/mode (setuid included; no_new_privs in the sandbox limits it)
//     and mtimes are kept. Extended attributes from the tar (PAX
//     SCHILY.xattr.*) are all dropped: security.* could carry file
//     capabilities or SELinux labels and trusted.overlay.* could forge
//     overlay metadata (redirects, metacopy). Only the opaque xattr that
//     Unpack itself writes is set.
//   - Entry count, per-file size and total size are capped (opts).
func Unpack(ctx context.Context, r io.Reader, dst string, opts UnpackOptions) error {
	rootfd, err := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open unpack destination %s: %w", dst, err)
	}
	u := &unpacker{root: rootfd, opts: opts.withDefaults(), buf: make([]byte, 128<<10), w: newWriters(2)}
	defer unix.Close(rootfd)
	// Workers must be done before the caller sees a result (it may remove
	// dst on failure); the fd of dst is closed after them.
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return u.w.close()
	}
	defer stop()

	tr := tar.NewReader(r)
	var entries int64
	for {
		if entries%512 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errdefs.InvalidArgument("malformed layer tar: %w", err)
		}
		entries++
		if entries > u.opts.MaxEntries {
			return errdefs.ResourceExhausted("layer has more than %d entries", u.opts.MaxEntries)
		}
		if err := u.entry(hdr, tr); err != nil {
			return fmt.Errorf("unpack %q: %w", hdr.Name, err)
		}
	}
	if err := stop(); err != nil {
		return err
	}
	return u.finishDirs()
}

type dirTime struct {
	name  string
	mtime time.Time
}

type unpacker struct {
	root  int
	opts  UnpackOptions
	total int64
	dirs  []dirTime
	buf   []byte
	w     *writers // small-file writers (unpack_parallel.go)
}

// CleanName turns a tar name into a clean path relative to the layer's
// root, or refuses it: a NUL byte, or a name that climbs above the root
// (a leading "/" is stripped). "." is the root itself. The snapshot
// package's EROFS writer applies the same rule.
func CleanName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errdefs.InvalidArgument("name contains a NUL byte")
	}
	c := path.Clean(strings.TrimLeft(name, "/"))
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errdefs.InvalidArgument("name escapes the layer root")
	}
	if c == "" {
		c = "."
	}
	return c, nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := CleanName(hdr.Name)
	if err != nil {
		return err
	}
	dir, base := path.Dir(name), path.Base(name)

	//lint:ignore SA1019 old archives still carry TypeRegA (NUL) for regular files
	small := (hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA) && hdr.Size >= 0 && hdr.Size <= smallFileMax &&
		!strings.HasPrefix(base, whiteoutPrefix) && name != "."
	if !small {
		// Everything else sees the stream's earlier writes finished.
		if err := u.w.barrier(); err != nil {
			return err
		}
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(dir, base)
	}
	if name == "." {
		// The layer root's own metadata is not applied: dst belongs to
		// the caller. Anything but a directory here is malformed.
		if hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return errdefs.InvalidArgument("non-directory entry for the layer root")
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || int64(hdr.Uid) > 1<<32-2 || int64(hdr.Gid) > 1<<32-2 {
		return errdefs.InvalidArgument("uid/gid out of range")
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		return u.mkdir(dir, base, hdr)
	//lint:ignore SA1019 old archives still carry TypeRegA (NUL) for regular files
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return u.file(dir, base, hdr, r)
	case tar.TypeSymlink:
		return u.symlink(dir, base, hdr)
	case tar.TypeLink:
		return u.hardlink(dir, base, name, hdr)
	case tar.TypeFifo:
		return u.fifo(dir, base, hdr)
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 {
			// Already in overlay whiteout form (e.g. a snapshot of an
			// upper dir). 0:0 is no device at all.
			pfd, err := u.parent(dir, true)
			if err != nil {
				return err
			}
			defer unix.Close(pfd)
			if err := replaceAt(pfd, base); err != nil {
				return err
			}
			return mknodWhiteout(pfd, base)
		}
		if u.opts.SkipDevices {
			return nil
		}
		// A device node in a lower dir would give the sandbox (or anyone
		// walking the host store) raw access to host hardware.
		return errdefs.InvalidArgument("device nodes are not allowed in layers")
	default:
		return errdefs.InvalidArgument("unsupported tar entry type %q", string(hdr.Typeflag))
	}
}

// parent opens the directory dir (relative to dst) as an O_PATH fd,
// resolving it inside dst; with create, missing components are made.
func (u *unpacker) parent(dir string, create bool) (int, error) {
	return resolveDir(u.root, dir, create)
}

func (u *unpacker) whiteout(dir, base string) error {
	if base == whiteoutOpaque {
		fd, err := openInRoot(u.root, dir, unix.O_RDONLY|unix.O_DIRECTORY)
		if errors.Is(err, unix.ENOENT) {
			pfd, err2 := u.parent(dir, true)
			if err2 != nil {
				return err2
			}
			unix.Close(pfd)
			fd, err = openInRoot(u.root, dir, unix.O_RDONLY|unix.O_DIRECTORY)
		}
		if err != nil {
			return fmt.Errorf("opaque dir: %w", err)
		}
		defer unix.Close(fd)
		return unix.Fsetxattr(fd, opaqueXattr, []byte("y"), 0)
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." || strings.HasPrefix(target, whiteoutPrefix) {
		return errdefs.InvalidArgument("invalid whiteout %q", base)
	}
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, target, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		// Image spec: a whiteout hides only lower layers; an entry of the
		// same name in this layer stays.
		return nil
	}
	return mknodWhiteout(pfd, target)
}

func mknodWhiteout(pfd int, name string) error {
	if err := unix.Mknodat(pfd, name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("create whiteout: %w", err)
	}
	return nil
}

func (u *unpacker) mkdir(dir, base string, hdr *tar.Header) error {
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	err = unix.Mkdirat(pfd, base, 0o700)
	if errors.Is(err, unix.EEXIST) {
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAllAt(pfd, base); err != nil {
				return err
			}
			err = unix.Mkdirat(pfd, base, 0o700)
		} else {
			err = nil // merge into the existing directory
		}
	}
	if err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := fdOwnerMode(fd, hdr); err != nil {
		return err
	}
	name := base
	if dir != "." {
		name = dir + "/" + base
	}
	u.dirs = append(u.dirs, dirTime{name: name, mtime: hdr.ModTime})
	return nil
}

func (u *unpacker) file(dir, base string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 || hdr.Size > u.opts.MaxFileSize {
		return errdefs.ResourceExhausted("file of %d bytes exceeds the %d byte limit", hdr.Size, u.opts.MaxFileSize)
	}
	if u.total+hdr.Size > u.opts.MaxTotalBytes {
		return errdefs.ResourceExhausted("layer exceeds the %d byte limit", u.opts.MaxTotalBytes)
	}
	u.total += hdr.Size
	if hdr.Typeflag != tar.TypeGNUSparse && hdr.Size <= smallFileMax {
		return u.smallFile(path.Join(dir, base), dir, base, hdr, r)
	}
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := replaceAt(pfd, base); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer unix.Close(fd)
	if err := copyToFd(fd, io.LimitReader(r, hdr.Size), hdr.Size, u.buf); err != nil {
		return err
	}
	if err := fdOwnerMode(fd, hdr); err != nil {
		return err
	}
	return setTimes(pfd, base, hdr)
}

// copyToFd writes exactly size bytes from r, leaving holes for all-zero
// blocks so sparse files stay sparse.
func copyToFd(fd int, r io.Reader, size int64, buf []byte) error {
	var off, written int64 // written: end of the last block actually written
	for off < size {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if n > 0 {
			if !allZero(buf[:n]) {
				if _, werr := unix.Pwrite(fd, buf[:n], off); werr != nil {
					return fmt.Errorf("write: %w", werr)
				}
				written = off + int64(n)
			}
			off += int64(n)
		}
		if err != nil {
			if off < size {
				return errdefs.InvalidArgument("truncated layer tar: %w", err)
			}
			break
		}
	}
	if written == size {
		return nil // no trailing hole: the file already has its size
	}
	return unix.Ftruncate(fd, size)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (u *unpacker) symlink(dir, base string, hdr *tar.Header) error {
	if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
		return errdefs.InvalidArgument("invalid symlink target")
	}
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := replaceAt(pfd, base); err != nil {
		return err
	}
	if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	return setTimes(pfd, base, hdr)
}

func (u *unpacker) hardlink(dir, base, name string, hdr *tar.Header) error {
	target, err := CleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hardlink target: %w", err)
	}
	if target == "." || target == name {
		return errdefs.InvalidArgument("invalid hardlink target %q", hdr.Linkname)
	}
	// The target's directory is resolved inside dst like any parent: a
	// link to /etc/shadow names dst/etc/shadow, and `d -> /etc` then a
	// link to d/shadow names dst/etc/shadow too (checklist item 2).
	tfd, err := u.parent(path.Dir(target), false)
	if err != nil {
		return fmt.Errorf("hardlink target: %w", err)
	}
	defer unix.Close(tfd)
	tbase := path.Base(target)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hardlink target: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return errdefs.InvalidArgument("hardlink to a directory")
	}
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := replaceAt(pfd, base); err != nil {
		return err
	}
	// flags 0: if the target is a symlink, link the symlink itself.
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return fmt.Errorf("hardlink: %w", err)
	}
	return nil
}

func (u *unpacker) fifo(dir, base string, hdr *tar.Header) error {
	pfd, err := u.parent(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := replaceAt(pfd, base); err != nil {
		return err
	}
	if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
		return fmt.Errorf("mkfifo: %w", err)
	}
	// O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := fdOwnerMode(fd, hdr); err != nil {
		return err
	}
	return setTimes(pfd, base, hdr)
}

// fdOwnerMode sets owner then mode: chown clears setuid/setgid, so the
// order keeps them.
func fdOwnerMode(fd int, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

func setTimes(pfd int, base string, hdr *tar.Header) error {
	mt := hdr.ModTime
	at := hdr.AccessTime
	if at.IsZero() {
		at = mt
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// finishDirs sets directory mtimes last (creating children changes them),
// deepest first.
func (u *unpacker) finishDirs() error {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		pfd, err := u.parent(path.Dir(d.name), false)
		if err != nil {
			continue // replaced by a later entry
		}
		ts := unix.NsecToTimespec(d.mtime.UnixNano())
		err = unix.UtimesNanoAt(pfd, path.Base(d.name), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("set dir times %q: %w", d.name, err)
		}
	}
	return nil
}

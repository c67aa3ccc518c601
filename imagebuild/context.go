package imagebuild

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// receiveContext unpacks the context tar into the build's scratch with
// image.Unpack (hostile-input rules: no name escapes, parents resolved in
// root, no device nodes, sizes capped) and opens a dir fd on it.
func (bd *build) receiveContext(ctx context.Context, r io.Reader) error {
	bd.ctxDir = filepath.Join(bd.tmp, "context")
	if err := os.Mkdir(bd.ctxDir, 0o700); err != nil {
		return err
	}
	if r != nil {
		opts := image.UnpackOptions{MaxTotalBytes: bd.b.opts.MaxContextBytes, MaxEntries: 1_000_000, SkipDevices: true}
		if err := image.Unpack(ctx, r, bd.ctxDir, opts); err != nil {
			return errdefs.Wrap(kindOr(err, errdefs.ErrInvalidArgument), err, "build context")
		}
	}
	fd, err := unix.Open(bd.ctxDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	bd.ctxFD = fd
	return nil
}

func kindOr(err, def error) error {
	if k := errdefs.Kind(err); k != nil && k != errdefs.ErrInternal {
		return k
	}
	return def
}

func (bd *build) readDockerfile() ([]byte, error) {
	rel, err := cleanSource(bd.req.Dockerfile)
	if err != nil {
		return nil, err
	}
	fd, err := openIn(bd.ctxFD, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, errdefs.InvalidArgument("the build context has no %s", bd.req.Dockerfile)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, errdefs.InvalidArgument("%s in the build context is not a regular file", bd.req.Dockerfile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxDockerfileBytes+1))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// addArchive unpacks a local tar (ADD's auto-extraction) into dest with
// image.Unpack, so `..` entries, absolute names, device nodes and
// symlink-then-write tricks stay inside dest or are refused. Owners from
// the tar are kept, as docker does; --chown does not apply.
func (bd *build) addArchive(ctx context.Context, root int, rel, dest string, _ copyOpts) error {
	fd, err := openIn(root, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return errdefs.NotFound("source %q not found", "/"+rel)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return errdefs.InvalidArgument("source %q is not a regular file", "/"+rel)
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	tr, closeFn, err := image.Decompress(f)
	if err != nil {
		return err
	}
	defer closeFn()
	opts := image.UnpackOptions{MaxTotalBytes: bd.b.opts.MaxContextBytes, MaxEntries: 1_000_000}
	if err := image.Unpack(ctx, tr, dest, opts); err != nil {
		// The reason names the archive's own entry and the rule it broke
		// (the archive is the caller's input); the host's staging path is
		// not part of it.
		why := strings.ReplaceAll(err.Error(), dest, "the destination")
		return errdefs.Wrap(kindOr(err, errdefs.ErrInvalidArgument), err, "hostile or broken archive: %s", why)
	}
	return nil
}

// isDirIn reports whether rel inside root is a directory.
func isDirIn(root int, rel string) bool {
	fd, err := openIn(root, rel, unix.O_PATH)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

func closeFD(fd int) { unix.Close(fd) }

// layerPath is a layer entry's name as a path from the root, without
// "./", a leading or a trailing slash.
func layerPath(name string) string {
	return strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "./"), "/"), "/")
}

// excluded reports whether a layer entry is berth's own sandbox plumbing
// rather than something a RUN step made: the agent's directory, the
// mount points of the files berth binds over (/etc/hosts, hostname,
// resolv.conf, /usr/bin/sudo when the image has no sudo; writes to those
// paths land in the bind sources, never in the upper) and the egress CA
// file each start writes (egress.InstallCA; its line in the trust bundle
// is stripped, see isTrustBundle).
func excluded(name string, size int64) bool {
	n := layerPath(name)
	switch {
	case n == strings.TrimPrefix(egress.CAFileInSandbox, "/"):
		return true
	case n == ".berth" || strings.HasPrefix(n, ".berth/"):
		return true
	case n == "etc/hosts" || n == "etc/hostname" || n == "etc/resolv.conf":
		return true
	case n == "usr/bin/sudo" && size == 0:
		return true
	}
	return false
}

// isTrustBundle reports whether a layer entry is the system trust bundle
// as a regular file StripCA can be given.
func isTrustBundle(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeReg && hdr.Size <= egress.MaxBundleBytes &&
		layerPath(hdr.Name) == strings.TrimPrefix(egress.BundleInSandbox, "/")
}

package snapshot

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Overlay and OCI layer markers.
const (
	whPrefix      = ".wh."
	whOpaque      = ".wh..wh..opq"
	xattrOpaque   = "trusted.overlay.opaque"
	xattrRedirect = "trusted.overlay.redirect"
	xattrMetacopy = "trusted.overlay.metacopy"
	pathMax       = 4095 // longest path restore can resolve (PATH_MAX without NUL)
)

type devIno struct{ dev, ino uint64 }

// walker writes the merged view of a stack of overlay-form layer dirs as
// one OCI layer. Capture is the one-layer case; Squash the many-layer one.
//
// Every directory is an open fd and every name is looked up with an *at
// call that does not follow symlinks, so a symlink the sandbox planted in
// its upper (`x -> /etc`, `y -> ../..`) is recorded as a symlink and never
// traversed: the host never reads a file outside the layer because a
// sandbox asked it to (the docker cp class, CVE-2018-15664; CVE-2019-14271
// is why no helper from the sandbox is ever run either).
type walker struct {
	ctx     context.Context
	tw      *tar.Writer
	opts    CaptureOptions
	entries int64
	skipped int64
	links   map[devIno]string
	buf     []byte
	pre     *prefetcher // nil: no read-ahead hints
}

// dir writes the children of the merged directory rel (a clean relative
// path, "" for the root). fds are the directory in each layer where it is
// part of the merge, top layer first.
func (w *walker) dir(rel string, fds []int, depth int) error {
	if depth > w.opts.MaxDepth {
		return errdefs.ResourceExhausted("cannot snapshot %q: directories nest deeper than %d levels", rel, w.opts.MaxDepth)
	}
	names, err := w.names(rel, fds)
	if err != nil {
		return err
	}
	w.pre.dir(fds[0], names)
	for _, name := range names {
		if err := w.entry(rel, name, fds, depth); err != nil {
			return err
		}
	}
	return nil
}

// names lists the union of the directory's entries over its layers, sorted
// (the same tree always gives the same bytes, so identical snapshots have
// identical digests). Reading stops once the entry budget is spent, so a
// directory with millions of names cannot exhaust host memory.
func (w *walker) names(rel string, fds []int) ([]string, error) {
	seen := map[string]struct{}{}
	for _, fd := range fds {
		// A fresh open file description of the same dir: its own
		// offset, and closing it leaves fd open for the *at calls.
		dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("reopen %q: %w", rel, err)
		}
		f := os.NewFile(uintptr(dup), rel)
		for {
			batch, err := f.Readdirnames(1024)
			for _, n := range batch {
				seen[n] = struct{}{}
			}
			if w.entries+int64(len(seen)) > w.opts.MaxEntries {
				f.Close()
				return nil, errdefs.ResourceExhausted("cannot snapshot: more than %d entries", w.opts.MaxEntries)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("read dir %q: %w", rel, err)
			}
		}
		f.Close()
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

func (w *walker) entry(rel, name string, fds []int, depth int) error {
	p := joinRel(rel, name)
	if w.entries%256 == 0 {
		if err := w.ctx.Err(); err != nil {
			return err
		}
	}
	if len(p)+len(whOpaque)+1 > pathMax {
		return errdefs.InvalidArgument("cannot snapshot %q...: path longer than %d bytes", p[:64], pathMax)
	}
	if strings.HasPrefix(name, whPrefix) {
		// In an OCI layer this name means "delete", so the file would
		// turn into a whiteout on restore. Overlay never makes such
		// names (its whiteouts are 0:0 devices); only a user file can.
		return errdefs.InvalidArgument("cannot snapshot %q: names starting with %q are reserved for whiteouts in layers", p, whPrefix)
	}
	top, st := -1, unix.Stat_t{}
	for i, fd := range fds {
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("stat %q: %w", p, err)
		}
		top = i
		break
	}
	if top < 0 {
		return nil // removed while we walked a live dir; nothing to record
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			// A whiteout's own mtime is when some unpack made the device
			// node, not anything of the sandbox's: a fixed time keeps
			// captures of the same tree byte-identical.
			return w.write(&tar.Header{Name: joinRel(rel, whPrefix+name), Typeflag: tar.TypeReg,
				ModTime: time.Unix(0, 0), Format: tar.FormatPAX}, nil)
		}
		w.skipped++ // a device node: no layer carries one (the runtime provides /dev)
		return nil
	case unix.S_IFDIR:
		return w.mergedDir(rel, name, fds[top:], depth)
	case unix.S_IFREG:
		return w.file(fds[top], name, p)
	case unix.S_IFLNK:
		buf := make([]byte, pathMax+1)
		n, err := unix.Readlinkat(fds[top], name, buf)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", p, err)
		}
		if n >= len(buf) {
			return errdefs.InvalidArgument("cannot snapshot %q: symlink target too long", p)
		}
		h := header(p, &st)
		h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, string(buf[:n]), 0o777
		return w.write(h, nil)
	case unix.S_IFIFO:
		h := header(p, &st)
		h.Typeflag = tar.TypeFifo
		return w.write(h, nil)
	default:
		w.skipped++ // sockets are endpoints of live processes, not data
		return nil
	}
}

// mergedDir writes directory name of rel and its merged contents. fds[0]
// holds it as a directory; lower layers merge in until one hides what is
// below (an opaque dir, a whiteout or a non-directory). If anything in the
// stack hid lower content, the written dir is opaque, so applying the one
// layer over the base image hides the base's dir too.
func (w *walker) mergedDir(rel, name string, fds []int, depth int) error {
	p := joinRel(rel, name)
	var open []int
	defer func() {
		for _, fd := range open {
			unix.Close(fd)
		}
	}()
	opaque := false
	var top unix.Stat_t
	for i, fd := range fds {
		if i > 0 {
			var st unix.Stat_t
			err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return fmt.Errorf("stat %q: %w", p, err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				opaque = true // a whiteout or file below hides the base
				break
			}
		}
		d, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open dir %q: %w", p, err)
		}
		open = append(open, d)
		if i == 0 {
			if err := unix.Fstat(d, &top); err != nil {
				return err
			}
		}
		if hasXattr(d, xattrRedirect) {
			// A renamed lower dir (redirect_dir=on): its content lives
			// under another name in a lower layer. berth mounts with
			// redirect_dir off; refuse rather than write a partial dir.
			return errdefs.FailedPrecondition("cannot snapshot %q: overlay redirect directories are not supported", p)
		}
		if isOpaque(d) {
			opaque = true
			break
		}
	}
	h := header(p+"/", &top)
	h.Typeflag = tar.TypeDir
	if err := w.write(h, nil); err != nil {
		return err
	}
	if opaque {
		oh := &tar.Header{Name: p + "/" + whOpaque, Typeflag: tar.TypeReg, ModTime: h.ModTime.Truncate(time.Second), Format: tar.FormatPAX}
		if err := w.write(oh, nil); err != nil {
			return err
		}
	}
	return w.dir(p, open, depth+1)
}

func (w *walker) file(dirfd int, name, p string) error {
	// O_NONBLOCK: if the name was swapped for a FIFO since the stat, the
	// open must not hang waiting for a writer; fstat below catches it.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errdefs.FailedPrecondition("cannot snapshot %q: it changed type during the snapshot (is the sandbox frozen?)", p)
	}
	if hasXattr(fd, xattrMetacopy) {
		// Metadata-only copy-up (metacopy=on): the data is in a lower
		// layer, and the upper file is a hollow placeholder.
		return errdefs.FailedPrecondition("cannot snapshot %q: overlay metacopy files are not supported", p)
	}
	h := header(p, &st)
	if st.Nlink > 1 {
		key := devIno{uint64(st.Dev), st.Ino}
		if first, ok := w.links[key]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			return w.write(h, nil)
		}
		w.links[key] = p
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	return w.write(h, f)
}

// write writes one header and, for regular files, exactly h.Size bytes.
func (w *walker) write(h *tar.Header, r io.Reader) error {
	w.entries++
	if w.entries > w.opts.MaxEntries {
		return errdefs.ResourceExhausted("cannot snapshot: more than %d entries", w.opts.MaxEntries)
	}
	if err := w.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write %q: %w", h.Name, err)
	}
	if r == nil || h.Size == 0 {
		return nil
	}
	var done int64
	for done < h.Size {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		n, err := r.Read(w.buf[:min(int64(len(w.buf)), h.Size-done)])
		if n > 0 {
			if _, werr := w.tw.Write(w.buf[:n]); werr != nil {
				return werr
			}
			done += int64(n)
		}
		if err == io.EOF && done < h.Size {
			return errdefs.FailedPrecondition("cannot snapshot %q: it shrank during the snapshot (is the sandbox frozen?)", h.Name)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %q: %w", h.Name, err)
		}
	}
	return nil
}

// header fills what every entry shares: numeric owner only (no name
// lookups: they would read the host's passwd, not the sandbox's), the
// permission bits with setuid/setgid/sticky, and the mtime to the
// nanosecond (PAX), so make-style tools see the same times after restore.
func header(name string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
}

func isOpaque(fd int) bool {
	var v [2]byte
	n, err := unix.Fgetxattr(fd, xattrOpaque, v[:])
	return err == nil && n == 1 && v[0] == 'y'
}

func hasXattr(fd int, name string) bool {
	_, err := unix.Fgetxattr(fd, name, nil)
	return err == nil || errors.Is(err, unix.ERANGE)
}

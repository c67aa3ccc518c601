package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// maxArchiveDepth bounds how deep the archive walk descends. The walk keeps
// one open descriptor per level (so that a directory swapped for a symlink
// mid-walk cannot redirect it); this keeps a pathological tree from
// exhausting descriptors (checklist #21).
const maxArchiveDepth = 1024

// maxGitignore bounds one .gitignore read by the walk.
const maxGitignore = 1 << 20

// archiveFlushEvery is how often a slow walk (many excluded files, little
// output) pushes buffered bytes to the host, whose stall timer would
// otherwise take the agent for dead.
const archiveFlushEvery = time.Second

// handleReadArchive streams DIR's tree as a tar. Entry names are relative
// to DIR; DIR itself is the first entry, "./". Once the 200 header is sent
// an error can no longer be reported in the body, so it aborts the
// response instead: the chunked stream is cut without its terminator and
// the tar without its end marker, and the host reads an unexpected EOF
// rather than a short archive that looks complete.
func (s *Server) handleReadArchive(w http.ResponseWriter, r *http.Request) {
	dir, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	for _, p := range q["exclude"] {
		if err := checkPattern(p); err != nil {
			httpio.WriteError(w, err)
			return
		}
	}
	excl, err := parseExcludes(q["exclude"])
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	gi := q.Get("gitignore")
	// DIR itself may be a symlink (a workspace linked elsewhere): it is
	// resolved by the kernel inside the sandbox, like any path the user
	// names. Nothing below it is followed.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			if _, serr := os.Stat(dir); serr == nil {
				err = errdefs.InvalidArgument("archive %s: not a directory", dir)
			}
		}
		httpio.WriteError(w, fspath.Error("archive", dir, err))
		return
	}
	a := &archiver{
		ctx:       r.Context(),
		excludes:  excl,
		gitignore: gi == "1" || gi == "true",
		links:     map[devIno]string{},
		rw:        w,
		lastFlush: time.Now(),
	}
	if a.gitignore {
		a.prefix, a.parents = workTreeIgnores(fd)
	}
	a.bw = bufio.NewWriterSize(w, 256<<10)
	a.tw = tar.NewWriter(a.bw)
	w.Header().Set("Content-Type", wire.ArchiveContentType)
	w.WriteHeader(http.StatusOK)
	err = a.walk(fd)
	if err == nil {
		err = a.tw.Close() // the end-of-archive marker
	}
	if err == nil {
		err = a.bw.Flush()
	}
	if err != nil {
		s.cfg.Logf("agent: archive %s: %v", dir, err)
		panic(http.ErrAbortHandler)
	}
}

// checkPattern refuses patterns that a query string could carry but that
// name no file (the same rules as paths).
func checkPattern(p string) error {
	if len(p) > maxPatternLen {
		return errdefs.InvalidArgument("exclude pattern is longer than %d bytes", maxPatternLen)
	}
	return nil
}

type devIno struct{ dev, ino uint64 }

type archiver struct {
	ctx       context.Context
	excludes  ignoreSet
	gitignore bool
	// prefix is DIR relative to its git work tree's root ("" when DIR is
	// the root or in no work tree); gitignore paths and set bases are
	// relative to that root. parents are the root's .git/info/exclude and
	// the .gitignore files from the root down to DIR's parent.
	prefix    string
	parents   []ignoreSet
	links     map[devIno]string // first archived name of each multiply-linked file
	tw        *tar.Writer
	bw        *bufio.Writer
	rw        http.ResponseWriter
	lastFlush time.Time
}

// walk archives the directory open at fd (and closes it).
func (a *archiver) walk(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	if err := a.tw.WriteHeader(header("./", tar.TypeDir, &st)); err != nil {
		unix.Close(fd)
		return err
	}
	if a.prefix != "" {
		// As in git, nothing below an ignored directory is included: if
		// DIR or a directory between it and the root is ignored, so is
		// all that DIR holds.
		segs := strings.Split(a.prefix, "/")
		for i := range segs {
			if ignored(a.parents, strings.Join(segs[:i+1], "/"), true) {
				unix.Close(fd)
				return nil
			}
		}
	}
	return a.walkDir(fd, "", a.parents, 0)
}

// inTree is rel (relative to DIR) relative to the work tree's root.
func (a *archiver) inTree(rel string) string {
	switch {
	case a.prefix == "":
		return rel
	case rel == "":
		return a.prefix
	}
	return a.prefix + "/" + rel
}

// maxWorkTreeAscent bounds how many parent directories are searched for
// the .git that marks a work tree's root.
const maxWorkTreeAscent = 64

// workTreeIgnores finds the git work tree that the directory open at fd
// lies in (the nearest ancestor holding .git, a directory or a worktree's
// file) and returns the directory's path relative to the root with the
// ignore sets that apply from above it, lowest precedence first: the
// root's .git/info/exclude, then each .gitignore from the root down to
// the directory's parent (the directory's own is read by the walk). A
// directory in no work tree gets none.
func workTreeIgnores(fd int) (prefix string, sets []ignoreSet) {
	dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !filepath.IsAbs(dir) {
		return "", nil
	}
	root := ""
	p := dir
	for i := 0; i < maxWorkTreeAscent; i++ {
		if _, err := os.Lstat(filepath.Join(p, ".git")); err == nil {
			root = p
			break
		}
		if p == "/" {
			break
		}
		p = filepath.Dir(p)
	}
	if root == "" {
		return "", nil
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", nil
	}
	if data, ok := readFileNoFollow(filepath.Join(root, ".git", "info"), "exclude"); ok {
		sets = append(sets, parseIgnoreFile("", data))
	}
	if rel == "." {
		return "", sets
	}
	segs := strings.Split(rel, "/")
	for i := range segs { // the root, then each directory above DIR
		base := strings.Join(segs[:i], "/")
		if data, ok := readFileNoFollow(filepath.Join(root, base), ".gitignore"); ok {
			sets = append(sets, parseIgnoreFile(base, data))
		}
	}
	return rel, sets
}

// readFileNoFollow reads dir/name if it is a regular file, up to
// maxGitignore bytes, following no symlink in name.
func readFileNoFollow(dir, name string) ([]byte, bool) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(dfd)
	return readIgnoreFile(dfd, name)
}

// walkDir archives the children of the directory open at fd, named rel
// ("" for the root), and closes fd. Every child is opened relative to its
// parent's descriptor with O_NOFOLLOW: a symlink is archived as a link and
// never entered, even if sandbox code swaps a directory for a link while
// the walk runs.
func (a *archiver) walkDir(fd int, rel string, sets []ignoreSet, depth int) error {
	d := os.NewFile(uintptr(fd), rel)
	defer d.Close()
	if depth > maxArchiveDepth {
		return errdefs.ResourceExhausted("archive: %s is nested more than %d directories deep", rel, maxArchiveDepth)
	}
	if a.gitignore {
		if data, ok := readGitignore(fd); ok {
			sets = append(sets[:len(sets):len(sets)], parseIgnoreFile(a.inTree(rel), data))
		}
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue // removed while we walked
			}
			return &os.PathError{Op: "lstat", Path: child, Err: err}
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if ignored([]ignoreSet{a.excludes}, child, isDir) || (a.gitignore && ignored(sets, a.inTree(child), isDir)) {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
					continue // removed or swapped for a non-directory meanwhile
				}
				return &os.PathError{Op: "open", Path: child, Err: err}
			}
			if err := unix.Fstat(cfd, &st); err != nil {
				unix.Close(cfd)
				return err
			}
			if err := a.tw.WriteHeader(header(child+"/", tar.TypeDir, &st)); err != nil {
				unix.Close(cfd)
				return err
			}
			if err := a.walkDir(cfd, child, sets, depth+1); err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := a.file(fd, name, child); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := readlinkat(fd, name)
			if err != nil {
				if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EINVAL) {
					continue
				}
				return &os.PathError{Op: "readlink", Path: child, Err: err}
			}
			h := header(child, tar.TypeSymlink, &st)
			h.Linkname = target
			if err := a.tw.WriteHeader(h); err != nil {
				return err
			}
		default:
			// Sockets, FIFOs and device nodes are not data; a restore
			// would refuse device nodes anyway.
			continue
		}
		a.maybeFlush()
	}
	return nil
}

// file archives one regular file. The header size is taken from the open
// descriptor; a file that shrinks while it is read fails the archive (it
// would otherwise be padded with bytes that were never in it), one that
// grows is cut at the size in the header.
func (a *archiver) file(dirfd int, name, child string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ELOOP) {
			return nil
		}
		return &os.PathError{Op: "open", Path: child, Err: err}
	}
	f := os.NewFile(uintptr(fd), child)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // swapped for something else meanwhile
	}
	if st.Nlink > 1 {
		key := devIno{uint64(st.Dev), st.Ino}
		if first, ok := a.links[key]; ok {
			h := header(child, tar.TypeLink, &st)
			h.Linkname = first
			return a.tw.WriteHeader(h)
		}
		a.links[key] = child
	}
	h := header(child, tar.TypeReg, &st)
	h.Size = st.Size
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(a.tw, &ctxReader{ctx: a.ctx, r: io.LimitReader(f, st.Size)})
	if err != nil {
		return err
	}
	if n != st.Size {
		return errdefs.FailedPrecondition("archive: %s shrank from %d to %d bytes while it was read", child, st.Size, n)
	}
	return nil
}

// ctxReader stops a long file copy when the host goes away.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (a *archiver) maybeFlush() {
	if time.Since(a.lastFlush) < archiveFlushEvery {
		return
	}
	a.lastFlush = time.Now()
	if a.bw.Flush() == nil {
		http.NewResponseController(a.rw).Flush()
	}
}

// header builds a PAX header by hand: tar.FileInfoHeader would look up
// user and group names, which a static agent must not do through NSS.
// PAX carries names of any length and any bytes (UTF-8, spaces,
// newlines) and sub-second mtimes.
func header(name string, typ byte, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     int64(st.Mode & 0o7777),
		Uid:      int(st.Uid),
		Gid:      int(st.Gid),
		ModTime:  time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:   tar.FormatPAX,
	}
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", syscall.ENAMETOOLONG
}

// readGitignore reads dir's .gitignore, if it is a regular file (a
// symlinked .gitignore is not followed).
func readGitignore(dirfd int) ([]byte, bool) { return readIgnoreFile(dirfd, ".gitignore") }

func readIgnoreFile(dirfd int, name string) ([]byte, bool) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxGitignore))
	return data, err == nil
}

// addArchiveRoutes registers the directory archive endpoints (backups).
func (s *Server) addArchiveRoutes() {
	s.mux.HandleFunc("GET /v1/archive", s.handleReadArchive)
	s.mux.HandleFunc("PUT /v1/archive", s.handleWriteArchive)
}

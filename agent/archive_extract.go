package agent

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Test-only switches that turn off one layer of the extractor's
// confinement, so the hostile-tar tests can show that their probes catch
// the hole when it is open (negative controls). Never set outside tests.
var (
	// extractNoChecks skips the lexical name checks and the rule that a
	// parent must be a directory this extraction created.
	extractNoChecks bool
	// extractNoRoot resolves names by joining them to the staging path
	// (following any symlink, honouring absolute names) instead of
	// through os.Root.
	extractNoRoot bool
)

// extractFS is what the extractor does to the staging tree. The real one is
// os.Root based; plainFS exists only for negative controls.
type extractFS interface {
	Mkdir(name string, perm fs.FileMode) error
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Symlink(oldname, newname string) error
	Link(oldname, newname string) error
	Lstat(name string) (fs.FileInfo, error)
	Lchown(name string, uid, gid int) error
	Chmod(name string, mode fs.FileMode) error
	Chtimes(name string, atime, mtime time.Time) error
	Lchtimes(name string, t time.Time) error
}

// rootFS confines every operation below the staging directory with
// os.Root (openat2 RESOLVE_BENEATH-style resolution): a name or symlink
// that would lead outside fails instead of being followed there.
type rootFS struct{ *os.Root }

func (r rootFS) Lchtimes(name string, t time.Time) error {
	d, err := r.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.UtimesNanoAt(int(d.Fd()), path.Base(name), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// plainFS is the naive extractor the attacks in checklist #1-2 were found
// in: names are joined to the base (or taken as is when absolute) and every
// symlink on the way is followed.
type plainFS struct{ base string }

func (p plainFS) j(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(p.base, name)
}
func (p plainFS) Mkdir(n string, m fs.FileMode) error { return os.Mkdir(p.j(n), m) }
func (p plainFS) OpenFile(n string, f int, m fs.FileMode) (*os.File, error) {
	return os.OpenFile(p.j(n), f, m)
}
func (p plainFS) Symlink(o, n string) error              { return os.Symlink(o, p.j(n)) }
func (p plainFS) Link(o, n string) error                 { return os.Link(p.j(o), p.j(n)) }
func (p plainFS) Lstat(n string) (fs.FileInfo, error)    { return os.Lstat(p.j(n)) }
func (p plainFS) Lchown(n string, u, g int) error        { return os.Lchown(p.j(n), u, g) }
func (p plainFS) Chmod(n string, m fs.FileMode) error    { return os.Chmod(p.j(n), m) }
func (p plainFS) Chtimes(n string, a, m time.Time) error { return os.Chtimes(p.j(n), a, m) }
func (p plainFS) Lchtimes(n string, t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, p.j(n), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

type dirMeta struct {
	name     string
	mode     fs.FileMode
	uid, gid int
	mtime    time.Time
}

// extractor unpacks one tar into a fresh, empty staging directory.
type extractor struct {
	fs        extractFS
	chown     bool // we are root: set owners
	preserve  bool // owners from the tar, else owner
	owner     account
	dirs      map[string]int // directories this extraction made → index in metas
	metas     []dirMeta
	res       wire.ArchiveResult
	checkName bool
}

func newExtractor(efs extractFS, owner account, preserve bool) *extractor {
	e := &extractor{
		fs:        efs,
		chown:     os.Geteuid() == 0,
		preserve:  preserve,
		owner:     owner,
		dirs:      map[string]int{".": 0},
		checkName: !extractNoChecks,
	}
	// The staging root, until the tar's "./" entry says otherwise.
	e.metas = append(e.metas, dirMeta{name: ".", mode: 0o755, uid: int(owner.uid), gid: int(owner.gid), mtime: time.Now()})
	return e
}

// hostile is the error for an entry the extractor refuses.
func hostile(name, why string) error {
	return errdefs.InvalidArgument("restore: refusing archive entry %q: %s", name, why)
}

// cleanName turns an entry name into a clean relative path, or refuses it.
// A name with a ".." component or an absolute name is the zip-slip shape
// (checklist #1) and is refused outright rather than cleaned into
// something else: a tampered backup must fail loudly.
func (e *extractor) cleanName(name string) (string, error) {
	if !e.checkName {
		return name, nil
	}
	switch {
	case name == "":
		return "", hostile(name, "empty name")
	case strings.IndexByte(name, 0) >= 0:
		return "", hostile(name, "NUL in name")
	case len(name) > fspath.MaxPath:
		return "", hostile(name, "name longer than PATH_MAX")
	case strings.HasPrefix(name, "/"):
		return "", hostile(name, "absolute name")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", hostile(name, "name climbs out with ..")
		}
	}
	clean := path.Clean(name)
	if !filepath.IsLocal(clean) && clean != "." {
		return "", hostile(name, "name is not local")
	}
	return clean, nil
}

// parents makes sure every parent of name is a directory this extraction
// created, creating missing ones. A parent that exists but is not one of
// ours is a symlink, file or hard link the archive planted earlier: writing
// through it is the "symlink e -> /etc, then e/passwd" attack, refused even
// though os.Root would also stop it from leaving the staging tree.
func (e *extractor) parents(name string) error {
	if !e.checkName {
		return nil
	}
	dir := path.Dir(name)
	if _, ok := e.dirs[dir]; ok {
		return nil
	}
	if err := e.parents(dir); err != nil {
		return err
	}
	if _, err := e.fs.Lstat(dir); err == nil {
		return hostile(name, "a parent is not a directory of the archive (symlink or file)")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := e.fs.Mkdir(dir, 0o700); err != nil {
		return err
	}
	e.dirs[dir] = len(e.metas)
	e.metas = append(e.metas, dirMeta{name: dir, mode: 0o755, uid: int(e.owner.uid), gid: int(e.owner.gid), mtime: time.Now()})
	return nil
}

func (e *extractor) ids(h *tar.Header) (int, int) {
	if e.preserve {
		return h.Uid, h.Gid
	}
	return int(e.owner.uid), int(e.owner.gid)
}

func (e *extractor) mode(h *tar.Header) fs.FileMode {
	m := uint32(h.Mode) & 0o7777
	if !e.preserve {
		// The owner changed: a setuid or setgid bit would now grant
		// the new owner's identity, which the archive never had.
		m &^= 0o6000
	}
	return fileModeFromUnix(m)
}

// fileModeFromUnix maps permission and special bits to fs.FileMode.
func fileModeFromUnix(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// entry extracts one tar entry.
func (e *extractor) entry(ctx context.Context, h *tar.Header, body io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := e.cleanName(h.Name)
	if err != nil {
		return err
	}
	if name == "." {
		if h.Typeflag != tar.TypeDir {
			return hostile(h.Name, "the root entry is not a directory")
		}
		uid, gid := e.ids(h)
		e.metas[0] = dirMeta{name: ".", mode: e.mode(h), uid: uid, gid: gid, mtime: h.ModTime}
		return nil
	}
	if err := e.parents(name); err != nil {
		return err
	}
	if i, ok := e.dirs[name]; ok && h.Typeflag == tar.TypeDir {
		// A directory first made as a parent, then listed itself.
		uid, gid := e.ids(h)
		e.metas[i] = dirMeta{name: name, mode: e.mode(h), uid: uid, gid: gid, mtime: h.ModTime}
		return nil
	}
	if e.checkName {
		if _, err := e.fs.Lstat(name); err == nil {
			return hostile(h.Name, "duplicate entry")
		}
	}
	uid, gid := e.ids(h)
	switch h.Typeflag {
	case tar.TypeDir:
		if err := e.fs.Mkdir(name, 0o700); err != nil {
			return err
		}
		e.dirs[name] = len(e.metas)
		e.metas = append(e.metas, dirMeta{name: name, mode: e.mode(h), uid: uid, gid: gid, mtime: h.ModTime})
		return nil
	case tar.TypeReg, tar.TypeGNUSparse:
		f, err := e.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, &ctxReader{ctx: ctx, r: body})
		e.res.Bytes += n
		if err == nil && e.chown {
			err = f.Chown(uid, gid)
		}
		if err == nil {
			err = f.Chmod(e.mode(h)) // after chown, which clears setuid
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		e.res.Files++
		return e.fs.Chtimes(name, h.ModTime, h.ModTime)
	case tar.TypeSymlink:
		// Any target is stored as is: a link is data, resolved later by
		// the kernel inside the sandbox. What matters is that nothing in
		// this extraction is written through it (parents, os.Root).
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			return hostile(h.Name, "bad symlink target")
		}
		if err := e.fs.Symlink(h.Linkname, name); err != nil {
			return err
		}
		if e.chown {
			if err := e.fs.Lchown(name, uid, gid); err != nil {
				return err
			}
		}
		e.res.Files++
		return e.fs.Lchtimes(name, h.ModTime)
	case tar.TypeLink:
		// A hard link may only point at a regular file this archive
		// already restored. "../../etc/shadow", "/etc/shadow" or a path
		// through a planted symlink would link a file outside the tree
		// into it (checklist #2).
		target, err := e.cleanName(h.Linkname)
		if err != nil {
			return hostile(h.Name, "hard link target: "+err.Error())
		}
		if e.checkName {
			if target == "." {
				return hostile(h.Name, "hard link to the root")
			}
			if _, ok := e.dirs[path.Dir(target)]; !ok {
				return hostile(h.Name, "hard link target is not inside the archive")
			}
			fi, err := e.fs.Lstat(target)
			if err != nil || !fi.Mode().IsRegular() {
				return hostile(h.Name, "hard link target is not a regular file of the archive")
			}
		}
		if err := e.fs.Link(target, name); err != nil {
			return err
		}
		e.res.Files++
		return nil
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return hostile(h.Name, "device nodes and FIFOs are not restored")
	default:
		return hostile(h.Name, "unsupported entry type "+string(rune(h.Typeflag)))
	}
}

// finish applies directory owners, modes and times, deepest first (a
// directory's mtime changes whenever an entry is created in it, and a
// read-only mode would stop its children from being written).
func (e *extractor) finish() error {
	for i := len(e.metas) - 1; i >= 0; i-- {
		m := e.metas[i]
		if e.chown {
			if err := e.fs.Lchown(m.name, m.uid, m.gid); err != nil {
				return err
			}
		}
		if err := e.fs.Chmod(m.name, m.mode); err != nil {
			return err
		}
		if err := e.fs.Chtimes(m.name, m.mtime, m.mtime); err != nil {
			return err
		}
	}
	e.res.Dirs = int64(len(e.metas))
	return nil
}

// markerReader tells a tar that ends with its end-of-archive marker from
// one cut at an entry boundary: archive/tar reports io.EOF for both. When
// the tar reader's very last read of the stream came back empty with
// io.EOF, the marker was never seen.
type markerReader struct {
	r        io.Reader
	emptyEOF bool
	err      error // a non-EOF error from the body (the host went away)
}

func (m *markerReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.emptyEOF = n == 0 && err == io.EOF
	if err != nil && err != io.EOF && m.err == nil {
		m.err = err
	}
	return n, err
}

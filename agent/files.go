package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/agent/internal/fspath"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/filetype"
)

// DefaultMaxListEntries caps one listing, so a sandbox with millions of files
// cannot make the agent (or the host decoding the answer) use unbounded
// memory or time (checklist #21).
const DefaultMaxListEntries = 100_000

func (s *Server) handleReadFile(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	// O_NONBLOCK so that opening a FIFO cannot hang the request; it is
	// refused below as not a regular file anyway.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		httpio.WriteError(w, fspath.Error("read", p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		httpio.WriteError(w, fspath.Error("read", p, err))
		return
	}
	if fi.IsDir() {
		httpio.WriteError(w, errdefs.InvalidArgument("read %s: is a directory", p))
		return
	}
	if !fi.Mode().IsRegular() {
		httpio.WriteError(w, errdefs.InvalidArgument("read %s: not a regular file", p))
		return
	}
	head := make([]byte, filetype.SniffLen)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		httpio.WriteError(w, fspath.Error("read", p, err))
		return
	}
	head = head[:n]
	mt, binary := filetype.Detect(p, head)
	w.Header().Set("Content-Type", mt)
	w.Header().Set(api.BinaryHeader, strconv.FormatBool(binary))
	w.WriteHeader(http.StatusOK)
	// No Content-Length: the file may change while it is read (and /proc
	// files report size 0). Chunked encoding still lets the client tell a
	// complete body from one cut short, because we abort on error.
	if _, err := w.Write(head); err != nil {
		panic(http.ErrAbortHandler)
	}
	if _, err := io.Copy(w, f); err != nil {
		panic(http.ErrAbortHandler)
	}
}

// bodyReader remembers whether an io.Copy failed reading the upload (the
// host went away) rather than writing the file (disk full, ...).
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func parseMode(s string, def os.FileMode) (os.FileMode, error) {
	if s == "" {
		return def, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, errdefs.InvalidArgument("mode %q is not an octal permission between 0 and 0777", s)
	}
	return os.FileMode(m), nil
}

// handleWriteFile writes the body to path so that it looks like a program
// writing that path, while a cut or failed upload never touches it:
//
//  1. The body is staged in a hidden file beside the target
//     (fspath.UploadPrefix), with the new file's owner and mode, and fsynced.
//  2. A new path gets the staged file by link(2): it appears whole, in one
//     step (watchers see one create), and a crash never leaves a partial
//     file under the real name.
//  3. An existing file is overwritten in place from the staged copy
//     (O_TRUNC, then copy_file_range): it keeps its inode, owner and mode
//     (mode changes only when the request sets it), and watchers see
//     modify, as for "cp staged path". The trade-off: a crash (not a cut
//     upload) during this local copy leaves the file truncated or partly
//     written; there is no way to keep the inode and be atomic.
//  4. The staged name is unlinked. A crash may leave it behind; it is
//     hidden from watches and removed by nothing else (the name is random).
//
// A symlink is followed, as by a program: the link's target is written.
func (s *Server) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	mode, err := parseMode(q.Get("mode"), 0o644)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	modeSet := q.Get("mode") != ""
	sc, err := s.fileScope(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	acct := sc.acct
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			httpio.WriteError(w, errdefs.InvalidArgument("write %s: is a directory", p))
			return
		}
		if !fi.Mode().IsRegular() {
			httpio.WriteError(w, errdefs.InvalidArgument("write %s: not a regular file", p))
			return
		}
	}
	dir := filepath.Dir(p)
	if err := mkdirAllOwned(dir, 0o755, acct); err != nil {
		httpio.WriteError(w, fspath.Error("mkdir", dir, err))
		return
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmpName := filepath.Join(dir, fspath.UploadPrefix+hex.EncodeToString(rnd[:]))
	tmp, err := os.OpenFile(tmpName, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		httpio.WriteError(w, fspath.Error("write", p, err))
		return
	}
	defer func() {
		tmp.Close()
		os.Remove(tmpName)
	}()
	if os.Geteuid() == 0 {
		if err := tmp.Chown(int(acct.uid), int(acct.gid)); err != nil {
			httpio.WriteError(w, fspath.Error("chown", p, err))
			return
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		httpio.WriteError(w, fspath.Error("chmod", p, err))
		return
	}
	body := &bodyReader{r: r.Body}
	if _, err := io.Copy(tmp, body); err != nil {
		if body.err != nil {
			httpio.WriteError(w, errdefs.Unavailable("write %s: upload interrupted: %w", p, body.err))
		} else {
			httpio.WriteError(w, fspath.Error("write", p, err))
		}
		return
	}
	if err := tmp.Sync(); err != nil {
		httpio.WriteError(w, fspath.Error("write", p, err))
		return
	}
	// New path: link the staged file in whole.
	err = unix.Linkat(unix.AT_FDCWD, tmpName, unix.AT_FDCWD, p, 0)
	if err == nil {
		syncDir(dir)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !errors.Is(err, unix.EEXIST) {
		httpio.WriteError(w, fspath.Error("write", p, err))
		return
	}
	// Existing path (or a symlink): overwrite in place.
	if err := overwriteFrom(p, tmp, mode, modeSet); err != nil {
		httpio.WriteError(w, fspath.Error("write", p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// overwriteFrom copies src over the file at p in place, as a program
// writing it would: same inode, owner and mode (mode is applied only when
// set). A path that turns out not to exist (a dangling symlink) is
// created, like open(O_CREAT) through a link.
func overwriteFrom(p string, src *os.File, mode os.FileMode, set bool) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, mode)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errdefs.InvalidArgument("write %s: not a regular file", p)
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil { // copy_file_range where it can
		return err
	}
	if set && fi.Mode().Perm() != mode {
		if err := f.Chmod(mode); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// syncDir makes a new directory entry (a link) durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// mkdirAllOwned is mkdir -p where each directory it creates is owned by
// acct and has exactly mode (not mode &^ umask).
func mkdirAllOwned(dir string, mode os.FileMode, acct account) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if fi.IsDir() {
			return nil
		}
		return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirAllOwned(parent, mode, acct); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil {
		if fi, e := os.Stat(dir); e == nil && fi.IsDir() {
			return nil // created concurrently
		}
		return err
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(dir, int(acct.uid), int(acct.gid)); err != nil {
			return err
		}
	}
	return os.Chmod(dir, mode)
}

func fileInfo(path string, fi os.FileInfo) api.FileInfo {
	info := api.FileInfo{
		Path:    path,
		Name:    fi.Name(),
		Size:    fi.Size(),
		Mode:    uint32(fi.Mode().Perm()),
		ModTime: fi.ModTime().UTC(),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Mode = st.Mode & 0o7777
		info.UID, info.GID = st.Uid, st.Gid
	}
	switch t := fi.Mode().Type(); {
	case t == 0:
		info.Type = "file"
		info.MimeType, info.Binary = sniffFile(path, fi.Size())
	case t == fs.ModeDir:
		info.Type = "dir"
	case t == fs.ModeSymlink:
		info.Type = "symlink"
		info.Target, _ = os.Readlink(path)
	default:
		info.Type = "other"
	}
	if path == "/" {
		info.Name = "/"
	}
	return info
}

// sniffFile reads up to filetype.SniffLen bytes of a regular file to tell
// its type. An empty file (and a /proc file, which reports size 0) is not
// read; one that cannot be opened is typed by its name alone.
func sniffFile(path string, size int64) (string, bool) {
	if size == 0 {
		return filetype.Detect(path, nil)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOATIME, 0)
	if errors.Is(err, syscall.EPERM) { // O_NOATIME on a file we do not own
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		return filetype.Detect(path, nil)
	}
	defer f.Close()
	head := make([]byte, filetype.SniffLen)
	n, _ := io.ReadFull(f, head)
	return filetype.Detect(path, head[:n])
}

// queryFlag reads a boolean query parameter ("1"/"true", "0"/"false").
func queryFlag(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	default:
		return false, errdefs.InvalidArgument("%s must be true or false, not %q", name, v)
	}
}

// handleList lists a directory (?recursive=1: its tree). ?hidden=0 leaves
// out dot files, and in a recursive listing everything below a dot
// directory (which is then not walked).
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	root, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	rec := r.URL.Query().Get("recursive")
	recursive := rec == "1" || rec == "true"
	showHidden := true
	switch v := r.URL.Query().Get("hidden"); v {
	case "", "1", "true":
	case "0", "false":
		showHidden = false
	default:
		httpio.WriteError(w, errdefs.InvalidArgument("hidden must be true or false, not %q", v))
		return
	}
	fi, err := os.Stat(root)
	if err != nil {
		httpio.WriteError(w, fspath.Error("list", root, err))
		return
	}
	if !fi.IsDir() {
		httpio.WriteError(w, errdefs.InvalidArgument("list %s: not a directory", root))
		return
	}
	files := []api.FileInfo{}
	stack := []string{root}
	for len(stack) > 0 {
		if err := r.Context().Err(); err != nil {
			return
		}
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		entries, err := os.ReadDir(dir)
		if err != nil {
			if dir == root {
				httpio.WriteError(w, fspath.Error("list", root, err))
				return
			}
			if errors.Is(err, syscall.ENAMETOOLONG) {
				httpio.WriteError(w, errTooDeep(root))
				return
			}
			continue // unreadable or deleted meanwhile: skip the subtree
		}
		var subdirs []string
		for _, e := range entries {
			if !showHidden && strings.HasPrefix(e.Name(), ".") {
				continue
			}
			full := filepath.Join(dir, e.Name())
			info, err := e.Info() // lstat
			if errors.Is(err, syscall.ENAMETOOLONG) {
				httpio.WriteError(w, errTooDeep(root))
				return
			}
			if err != nil {
				continue
			}
			if len(files) >= s.cfg.MaxListEntries {
				httpio.WriteError(w, errdefs.ResourceExhausted("list %s: more than %d entries; list a subdirectory", root, s.cfg.MaxListEntries))
				return
			}
			files = append(files, fileInfo(full, info))
			// e.IsDir is false for a symlink to a directory: a
			// recursive listing never follows links (no loops, no
			// walking out of the requested tree).
			if recursive && e.IsDir() {
				subdirs = append(subdirs, full)
			}
		}
		for i := len(subdirs) - 1; i >= 0; i-- {
			stack = append(stack, subdirs[i])
		}
	}
	httpio.WriteJSON(w, http.StatusOK, api.FileList{Files: files})
}

// errTooDeep refuses a recursive listing that reaches a path longer than
// the kernel's limit: skipping it would return a silently truncated tree.
func errTooDeep(root string) error {
	return errdefs.ResourceExhausted("list %s: directories nest too deep to list (a path exceeds the kernel's limit)", root)
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		httpio.WriteError(w, fspath.Error("stat", p, err))
		return
	}
	httpio.WriteJSON(w, http.StatusOK, fileInfo(p, fi))
}

func (s *Server) handleExists(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	_, err = os.Lstat(p)
	switch {
	case err == nil:
		httpio.WriteJSON(w, http.StatusOK, api.ExistsResponse{Exists: true})
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		httpio.WriteJSON(w, http.StatusOK, api.ExistsResponse{Exists: false})
	default:
		httpio.WriteError(w, fspath.Error("stat", p, err))
	}
}

func (s *Server) handleMkdir(w http.ResponseWriter, r *http.Request) {
	var req api.MkdirRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	sc, err := s.fileScope(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	acct := sc.acct
	p, err := fspath.Resolve(req.Path, sc.base)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	mode := os.FileMode(0o755)
	if req.Mode != 0 {
		if req.Mode > 0o777 {
			httpio.WriteError(w, errdefs.InvalidArgument("mode %#o is not a permission between 0 and 0777", req.Mode))
			return
		}
		mode = os.FileMode(req.Mode)
	}
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		httpio.WriteError(w, errdefs.AlreadyExists("mkdir %s: exists and is not a directory", p))
		return
	}
	if err := mkdirAllOwned(p, mode, acct); err != nil {
		httpio.WriteError(w, fspath.Error("mkdir", p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	if p == "/" {
		httpio.WriteError(w, errdefs.InvalidArgument("refusing to remove /"))
		return
	}
	q := r.URL.Query()
	kind := q.Get("type")
	switch kind {
	case "", "file", "dir":
	default:
		httpio.WriteError(w, errdefs.InvalidArgument("type must be file or dir, not %q", kind))
		return
	}
	recursive, err := queryFlag(r, "recursive")
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	if kind == "file" && recursive {
		httpio.WriteError(w, errdefs.InvalidArgument("type=file removes one file: it does not take recursive"))
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		httpio.WriteError(w, fspath.Error("remove", p, err))
		return
	}
	switch {
	case kind == "file" && fi.IsDir():
		httpio.WriteError(w, errdefs.InvalidArgument("remove %s: is a directory (type=file removes only files)", p))
		return
	case kind == "dir" && !fi.IsDir():
		httpio.WriteError(w, errdefs.InvalidArgument("remove %s: not a directory (type=dir removes only directories)", p))
		return
	}
	switch {
	case kind == "file":
		// unlink(2) never removes a directory, even one that became
		// a directory since the Lstat above.
		err = syscall.Unlink(p)
		if errors.Is(err, syscall.EISDIR) {
			err = errdefs.InvalidArgument("remove %s: is a directory (type=file removes only files)", p)
		}
	case recursive:
		err = os.RemoveAll(p)
	default:
		err = os.Remove(p)
	}
	if err != nil {
		httpio.WriteError(w, fspath.Error("remove", p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRename(w http.ResponseWriter, r *http.Request) {
	var req api.RenameRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	sc, err := s.fileScope(r)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	home := sc.base
	from, err := fspath.Resolve(req.From, home)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	to, err := fspath.Resolve(req.To, home)
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	if err := os.Rename(from, to); err != nil {
		httpio.WriteError(w, fspath.Error("rename", from, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

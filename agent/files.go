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
	"syscall"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// DefaultMaxListEntries caps one listing, so a sandbox with millions of files
// cannot make the agent (or the host decoding the answer) use unbounded
// memory or time (checklist #21).
const DefaultMaxListEntries = 100_000

func (s *Server) handleReadFile(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	// O_NONBLOCK so that opening a FIFO cannot hang the request; it is
	// refused below as not a regular file anyway.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		writeError(w, fsError("read", p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, fsError("read", p, err))
		return
	}
	if fi.IsDir() {
		writeError(w, errdefs.InvalidArgument("read %s: is a directory", p))
		return
	}
	if !fi.Mode().IsRegular() {
		writeError(w, errdefs.InvalidArgument("read %s: not a regular file", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	// No Content-Length: the file may change while it is read (and /proc
	// files report size 0). Chunked encoding still lets the client tell a
	// complete body from one cut short, because we abort on error.
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

// handleWriteFile writes the body to a temp file beside the target, fsyncs
// it and renames it over the target: a crash or a cut upload never leaves a
// half-written file under the real name.
func (s *Server) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	mode, err := parseMode(q.Get("mode"), 0o644)
	if err != nil {
		writeError(w, err)
		return
	}
	acct, err := s.resolveUser(q.Get("user"))
	if err != nil {
		writeError(w, err)
		return
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		writeError(w, errdefs.InvalidArgument("write %s: is a directory", p))
		return
	}
	dir := filepath.Dir(p)
	if err := mkdirAllOwned(dir, 0o755, acct); err != nil {
		writeError(w, fsError("mkdir", dir, err))
		return
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmpName := filepath.Join(dir, ".berth-upload-"+hex.EncodeToString(rnd[:]))
	tmp, err := os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		writeError(w, fsError("write", p, err))
		return
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if os.Geteuid() == 0 {
		if err := tmp.Chown(int(acct.uid), int(acct.gid)); err != nil {
			writeError(w, fsError("chown", p, err))
			return
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		writeError(w, fsError("chmod", p, err))
		return
	}
	body := &bodyReader{r: r.Body}
	if _, err := io.Copy(tmp, body); err != nil {
		if body.err != nil {
			writeError(w, errdefs.Unavailable("write %s: upload interrupted: %v", p, body.err))
		} else {
			writeError(w, fsError("write", p, err))
		}
		return
	}
	if err := tmp.Sync(); err != nil {
		writeError(w, fsError("write", p, err))
		return
	}
	if err := tmp.Close(); err != nil {
		writeError(w, fsError("write", p, err))
		return
	}
	if err := os.Rename(tmpName, p); err != nil {
		writeError(w, fsError("write", p, err))
		return
	}
	committed = true
	syncDir(dir)
	w.WriteHeader(http.StatusNoContent)
}

// syncDir makes a rename durable.
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

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	root, err := s.pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	rec := r.URL.Query().Get("recursive")
	recursive := rec == "1" || rec == "true"
	fi, err := os.Stat(root)
	if err != nil {
		writeError(w, fsError("list", root, err))
		return
	}
	if !fi.IsDir() {
		writeError(w, errdefs.InvalidArgument("list %s: not a directory", root))
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
				writeError(w, fsError("list", root, err))
				return
			}
			if errors.Is(err, syscall.ENAMETOOLONG) {
				writeError(w, errTooDeep(root))
				return
			}
			continue // unreadable or deleted meanwhile: skip the subtree
		}
		var subdirs []string
		for _, e := range entries {
			full := filepath.Join(dir, e.Name())
			info, err := e.Info() // lstat
			if errors.Is(err, syscall.ENAMETOOLONG) {
				writeError(w, errTooDeep(root))
				return
			}
			if err != nil {
				continue
			}
			if len(files) >= s.cfg.MaxListEntries {
				writeError(w, errdefs.ResourceExhausted("list %s: more than %d entries; list a subdirectory", root, s.cfg.MaxListEntries))
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
	writeJSON(w, http.StatusOK, api.FileList{Files: files})
}

// errTooDeep refuses a recursive listing that reaches a path longer than
// the kernel's limit: skipping it would return a silently truncated tree.
func errTooDeep(root string) error {
	return errdefs.ResourceExhausted("list %s: directories nest too deep to list (a path exceeds the kernel's limit)", root)
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		writeError(w, fsError("stat", p, err))
		return
	}
	writeJSON(w, http.StatusOK, fileInfo(p, fi))
}

func (s *Server) handleExists(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	_, err = os.Lstat(p)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, api.ExistsResponse{Exists: true})
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		writeJSON(w, http.StatusOK, api.ExistsResponse{Exists: false})
	default:
		writeError(w, fsError("stat", p, err))
	}
}

func (s *Server) handleMkdir(w http.ResponseWriter, r *http.Request) {
	var req api.MkdirRequest
	if err := decodeJSON(w, r, maxSmallBody, &req); err != nil {
		writeError(w, err)
		return
	}
	acct := s.defaultAccount()
	p, err := resolvePath(req.Path, acct.home)
	if err != nil {
		writeError(w, err)
		return
	}
	mode := os.FileMode(0o755)
	if req.Mode != 0 {
		if req.Mode > 0o777 {
			writeError(w, errdefs.InvalidArgument("mode %#o is not a permission between 0 and 0777", req.Mode))
			return
		}
		mode = os.FileMode(req.Mode)
	}
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		writeError(w, errdefs.AlreadyExists("mkdir %s: exists and is not a directory", p))
		return
	}
	if err := mkdirAllOwned(p, mode, acct); err != nil {
		writeError(w, fsError("mkdir", p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathParam(r, "path")
	if err != nil {
		writeError(w, err)
		return
	}
	if p == "/" {
		writeError(w, errdefs.InvalidArgument("refusing to remove /"))
		return
	}
	if _, err := os.Lstat(p); err != nil {
		writeError(w, fsError("remove", p, err))
		return
	}
	rec := r.URL.Query().Get("recursive")
	if rec == "1" || rec == "true" {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		writeError(w, fsError("remove", p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleRename(w http.ResponseWriter, r *http.Request) {
	var req api.RenameRequest
	if err := decodeJSON(w, r, maxSmallBody, &req); err != nil {
		writeError(w, err)
		return
	}
	home := s.defaultAccount().home
	from, err := resolvePath(req.From, home)
	if err != nil {
		writeError(w, err)
		return
	}
	to, err := resolvePath(req.To, home)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := os.Rename(from, to); err != nil {
		writeError(w, fsError("rename", from, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

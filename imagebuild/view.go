package imagebuild

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// view is a read-only merged filesystem of a stage's layers on the host,
// for COPY --from and for looking up users and directories. One layer is
// its own directory; several are a read-only overlay mount (lowers only,
// no upper), mounted nosuid,nodev,noexec: nothing in it ever runs on the
// host.
type view struct {
	root    string
	fd      int
	mounted bool
}

// openView merges dirs (lowest first) under tmp.
func openView(tmp string, dirs []string) (*view, error) {
	v := &view{fd: -1}
	switch len(dirs) {
	case 0:
		d, err := os.MkdirTemp(tmp, "empty-")
		if err != nil {
			return nil, err
		}
		v.root = d
	case 1:
		v.root = dirs[0]
	default:
		d, err := os.MkdirTemp(tmp, "view-")
		if err != nil {
			return nil, err
		}
		lowers := make([]string, len(dirs))
		for i, l := range dirs {
			lowers[len(dirs)-1-i] = l // overlay lists the top first
		}
		opts := "lowerdir=" + strings.Join(lowers, ":")
		if err := unix.Mount("overlay", d, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			os.Remove(d)
			return nil, fmt.Errorf("mount the stage's layers: %w", err)
		}
		v.root, v.mounted = d, true
	}
	fd, err := unix.Open(v.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		v.close()
		return nil, err
	}
	v.fd = fd
	return v, nil
}

func (v *view) close() {
	if v.fd >= 0 {
		unix.Close(v.fd)
		v.fd = -1
	}
	if v.mounted {
		_ = unix.Unmount(v.root, unix.MNT_DETACH)
		os.Remove(v.root)
		v.mounted = false
	}
}

// isDir reports whether p (absolute, inside the view) is a directory.
func (v *view) isDir(p string) bool {
	fd, err := openIn(v.fd, strings.TrimPrefix(p, "/"), unix.O_PATH)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// mirrorParents creates in stg the directories on the way to p (and p
// itself when it is a directory destination) with the owner and mode they
// have in the view, 0755 root where the view lacks them.
func (v *view) mirrorParents(stg, p string, self bool) error {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	if !self {
		parts = parts[:len(parts)-1]
	}
	cur := ""
	for _, part := range parts {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		d := filepath.Join(stg, filepath.FromSlash(cur))
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		fd, err := openIn(v.fd, cur, unix.O_PATH)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if err := os.Lchown(d, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if err := os.Chmod(d, os.FileMode(st.Mode&0o777)|modeBits(st.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// readSmall reads a small file (passwd, group) inside the view.
func (v *view) readSmall(p string, max int64) ([]byte, error) {
	fd, err := openIn(v.fd, strings.TrimPrefix(p, "/"), unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

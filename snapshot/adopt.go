package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// CleanLayer brings a captured upper dir into the form a restore of its
// blob gives, in place, so that the dir itself can serve as that layer on
// the host that captured it (Cache.Adopt): every extended attribute but
// overlay's opaque marker on directories is removed (Capture carries none:
// security.capability would be a privilege gain, user.* is not in the
// layer format), and sockets and device nodes other than overlay's 0:0
// whiteouts are deleted (Capture skips them). Call it only on a tree that
// Capture accepted (no reserved .wh. names, no redirect or metacopy
// entries) and that nothing else changes: a host-private copy such as an
// upper snapshot. Symlinks are never followed.
func CleanLayer(dir string) error {
	buf := make([]byte, 4096)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		t := d.Type()
		if t&(fs.ModeSocket|fs.ModeDevice) != 0 {
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
				return nil // a whiteout
			}
			return removeKeepingTimes(p)
		}
		names, err := listXattrs(p, &buf)
		if err != nil {
			return err
		}
		for _, n := range names {
			if n == xattrOpaque && d.IsDir() {
				continue
			}
			if err := unix.Lremovexattr(p, n); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("snapshot: remove xattr %s of %s: %w", n, p, err)
			}
		}
		return nil
	})
}

// removeKeepingTimes deletes p and puts back its directory's times (the
// layer's directory mtimes are the captured ones).
func removeKeepingTimes(p string) error {
	parent := filepath.Dir(p)
	var st unix.Stat_t
	if err := unix.Lstat(parent, &st); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, parent, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// listXattrs lists p's extended attribute names without following a
// symlink.
func listXattrs(p string, buf *[]byte) ([]string, error) {
	for {
		n, err := unix.Llistxattr(p, *buf)
		if errors.Is(err, unix.ERANGE) {
			*buf = make([]byte, 2*len(*buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot: list xattrs of %s: %w", p, err)
		}
		if n == 0 {
			return nil, nil
		}
		return strings.Split(strings.TrimSuffix(string((*buf)[:n]), "\x00"), "\x00"), nil
	}
}

// subvolSuffix marks a slot whose layer is an adopted directory tree (a
// read-only subvolume the cache deletes with its Volumes hook); the file
// holds the layer's subdirectory inside the slot.
const subvolSuffix = ".subvol"

// SetDestroyer lets the cache hold adopted layers (Adopt): destroy deletes
// such a layer's tree (a read-only btrfs subvolume, which os.RemoveAll
// cannot delete). Without it, Adopt is refused. Call it once, right after
// opening the cache: it also deletes adopted trees that a crash left
// without their completeness marker.
func (c *Cache) SetDestroyer(destroy func(path string) error) {
	c.destroy = destroy
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		slot, ok := strings.CutSuffix(e.Name(), subvolSuffix)
		if ok && !strings.HasPrefix(slot, ".") && readSum(filepath.Join(c.dir, slot+".sha256")) == "" {
			c.drop(slot)
		}
	}
}

// ErrCached reports that Adopt found the layer cached already: the caller
// keeps (and disposes of) its tree.
var ErrCached = errors.New("snapshot: layer already cached")

// Adopt makes a tree the cached layer of snapshot id, whose blob has
// digest sum: place moves the tree to the path it is given (in the cache
// dir, on the cache's filesystem), and the layer's content is its
// subdirectory sub. The tree is deleted with the destroy hook when the
// layer is removed. It is the caller's word that the tree is exactly that
// blob's content: both come from one capture, and CleanLayer ran on it. A
// restore of the layer on this host then costs no fetch, decode or image
// write.
func (c *Cache) Adopt(id, sum, sub string, place func(dst string) error) error {
	if c.destroy == nil {
		return errdefs.FailedPrecondition("snapshot cache: adopting layers is not set up")
	}
	if err := validID(id); err != nil {
		return err
	}
	sum, err := validSHA(sum)
	if err != nil {
		return err
	}
	if sub == "" || sub == "." || sub == ".." || strings.ContainsAny(sub, "/,:\\\n") {
		return errdefs.InvalidArgument("snapshot cache: invalid layer subdirectory %q", sub)
	}
	unlock := c.lock(sum)
	defer unlock()
	if prev := readSum(filepath.Join(c.dir, ".ids", id)); prev != "" && prev != sum {
		return errdefs.FailedPrecondition("snapshot %s is cached with digest %s, not %s", id, prev, sum)
	}
	if _, ok, err := c.lookup(sum); err != nil {
		return err
	} else if ok {
		if err := c.ref(id, sum); err != nil {
			return err
		}
		return ErrCached
	}
	slot := c.freeSlot(sum)
	if err := c.drop(slot); err != nil {
		return err
	}
	p := filepath.Join(c.dir, slot)
	// The mark first: a crash after the move leaves a tree that drop
	// knows to delete with the hook.
	if err := writeFileSync(p+subvolSuffix, sub); err != nil {
		return err
	}
	if err := place(p); err != nil {
		c.drop(slot)
		return fmt.Errorf("snapshot cache: adopt layer of %s: %w", id, err)
	}
	if err := writeFileSync(p+".sha256", sum); err != nil {
		c.drop(slot)
		return err
	}
	return c.ref(id, sum)
}

// adoptedSub returns the layer subdirectory of an adopted slot, or "".
func (c *Cache) adoptedSub(slot string) string {
	s := readSum(filepath.Join(c.dir, slot+subvolSuffix))
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/,:\\\n") {
		return ""
	}
	return s
}

package snapshot

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/snapshot/erofs"
)

// errNoMount: this host cannot mount a layer image (no erofs, no
// file-backed mounts, or no privilege); the cache unpacks instead.
var errNoMount = errors.New("snapshot: layer images cannot be mounted on this host")

// mountImage mounts the EROFS image file img read-only at target. The
// caller has verified img's digest. nodev and nosuid: the host's view of a
// lower is data, never a way to reach a device or gain an id (the cache dir
// is 0700 as well); inside sandboxes the overlay's own flags apply.
func mountImage(img, target string) error {
	err := unix.Mount(img, target, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "")
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENOTBLK):
		// No privilege, no erofs, or an erofs without file-backed mounts.
		return fmt.Errorf("%w: mount %s: %v", errNoMount, img, err)
	default:
		return errdefs.Internal("snapshot: mount layer image %s: %w", img, err)
	}
}

// mounted reports whether an EROFS filesystem is mounted at p.
func mounted(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && uint32(st.Type) == erofs.SuperMagic
}

// unmountLayer detaches every EROFS mount stacked at p. An overlay that
// still uses one keeps it alive until that overlay goes.
func unmountLayer(p string) error {
	for i := 0; mounted(p); i++ {
		err := unix.Unmount(p, unix.MNT_DETACH)
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("snapshot: unmount layer %s: %w", p, err)
		}
		if i > 16 {
			return errdefs.Internal("snapshot: layer %s stays mounted", p)
		}
		if err != nil {
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// imageDigest is erofs.Digest of the image file f.
func imageDigest(f *os.File) (string, error) {
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	return erofs.Digest(f, st.Size())
}

func fsyncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

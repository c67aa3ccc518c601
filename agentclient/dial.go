package agentclient

import (
	"context"
	"net"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/internal/errdefs"
)

// dialPinned connects to the unix socket at path without following a
// symlink in its last component.
//
// The socket lives in a directory that is bind-mounted into the sandbox, so
// sandbox root can replace agent.sock with a symlink to any host socket
// (/var/run/docker.sock, the berth API socket...). connect(2) on the path
// would follow that link on the host and hand the sandbox a host service:
// the same confused-deputy class as CVE-2018-15664 and CVE-2021-30465.
// Instead we open the path with O_PATH|O_NOFOLLOW (a symlink yields an fd
// to the link itself), check that the pinned inode is a socket, and connect
// through /proc/self/fd/N, which resolves to exactly that inode, so a swap
// between the check and the connect is harmless. The parent directories must
// not be writable by the sandbox; only the last component is.
func dialPinned(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errdefs.Unavailable("sandbox agent socket %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, errdefs.Unavailable("sandbox agent socket %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, errdefs.FailedPrecondition("refusing to dial sandbox agent socket %s: it is %s, not a socket (a sandbox may have planted it)", path, fileKind(st.Mode))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, errdefs.Unavailable("sandbox agent socket %s: %w", path, err)
	}
	return conn, nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "not a socket"
}

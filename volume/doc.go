// Package volume keeps named volumes: data that exists apart from any
// sandbox, mounted into sandboxes at start and kept when they go.
//
// # Layout
//
// A volume is a btrfs subvolume, <dataDir>/volumes/v/<name>, with a quota
// group limit of its size. When the data dir is on btrfs, volumes/ is a
// directory there; otherwise it is a sparse btrfs image,
// <dataDir>/volumes.img (sized by `berth serve --volumes-size`, made on
// first use), loop-mounted at volumes/. Both directories are 0700 root:
// no host user reaches a volume's files by path.
//
// A snapshot is a read-only btrfs snapshot (BTRFS_IOC_SNAP_CREATE_V2 with
// BTRFS_SUBVOL_RDONLY) and a fork a writable one: copy-on-write, so both
// cost one transaction commit whatever the volume holds, and neither
// depends on its origin afterwards (removing the origin keeps them).
//
// # Rules
//
// Records live in the store (store.Volumes), with conditional writes:
// a volume has at most one writer (a sandbox mounting it read-write) and
// any number of readers; a second read-write mount is refused with
// failed precondition naming the writer. A snapshot is mounted read-only
// only. A sandbox's claims are released when its compute stops (destroy,
// sleep, a failed start); a claim whose holder is no longer live (a crash
// between stop and release) is taken over (Options.Live). A volume in use
// cannot be removed.
//
// # Mounting without host paths
//
// Attach never hands a host path to the OCI runtime. The subvolume is
// opened by fd beneath the volumes directory (openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV), cloned into a
// detached mount (open_tree), made nosuid, nodev, idmapped to the
// sandbox's user namespace and read-only when asked (mount_setattr), and
// attached (move_mount) to a directory fd that was itself resolved one
// component at a time inside the sandbox's root with the same flags,
// making missing directories as the sandbox's root. A symlink or another
// mount anywhere on the sandbox-side path is refused. The runtime then
// takes the volume along with the root (runc binds the root recursively).
// Symlinks inside a volume are the sandbox's own business: they resolve
// inside the sandbox's mount namespace, never on the host.
//
// # Cluster mode
//
// Syncer is where a volume's content will follow it between nodes (push
// to S3 when its writer detaches, fetch where it is next mounted). Today
// only Local exists: a volume lives on the node that made it, and a
// sandbox on another node that asks for it is refused.
package volume

// Package rootfs assembles each sandbox's root filesystem: an overlayfs whose
// lower layers are read-only image (and snapshot) layers and whose upper layer
// is the sandbox's own writable layer, with a real, kernel-enforced disk limit.
//
// # Layout under dataDir
//
//	uppers.img            one sparse file (default 64 GiB), a btrfs filesystem
//	uppers/               where uppers.img is loop-mounted
//	uppers/<id>/          one btrfs subvolume per sandbox (its quota group)
//	uppers/<id>/upper     overlay upperdir: everything the sandbox wrote
//	uppers/<id>/work      overlay workdir (same filesystem as upper, as overlay requires)
//	sandboxes/<id>/rootfs the overlay mount point handed to the OCI runtime
//
// # Why btrfs quota groups and not XFS/ext4 project quotas
//
// The brief asked for XFS with prjquota. This host's kernel is built without
// CONFIG_XFS_QUOTA ("XFS: quota support not available in this kernel") and
// without CONFIG_QFMT_V2, which ext4's quota feature needs, so neither project
// quota can be mounted here (both verified with a loop filesystem). btrfs is
// built in and its quota groups give the same property: each sandbox's upper
// is a subvolume and the subvolume's quota group has a hard limit on bytes, so
// a sandbox that fills its disk gets EDQUOT while the host only loses what
// the quota allowed (the image file is sparse). Subvolume ids are allocated by
// the filesystem, so there is no project-id allocator to persist or to collide.
// Everything on the hot path (create subvolume, set limit, destroy subvolume)
// is an ioctl from Go; mkfs.btrfs runs once, the first time Open sees the
// data dir. btrfs-progs (mkfs.btrfs) must therefore be installed.
//
// Simple quotas (kernel >= 6.7) are enabled when the kernel has them: extents
// are charged to the subvolume that wrote them, with no backref walks at
// commit time. Older kernels fall back to full qgroups, which are cheap here
// because sandboxes never share extents. btrfs has no inode quota; metadata is
// charged to the quota group, so millions of empty files still hit the byte
// limit (checklist #21).
//
// # Overlay options
//
// index=off: the index feature ties an upper to the exact lowers it was
// created with; a sandbox woken on a restored snapshot layer, or an upper kept
// across a lower-path change, would fail to mount. xino is left to the kernel
// default. The mount(2) option string is limited to one page; a lowerdir list
// longer than that is rejected with a clear error (the image package keeps
// layer paths short).
//
// Security notes: ids are validated (no "/", "..", control characters) before
// they become paths, so an id cannot name a directory outside dataDir. Layer
// paths with ',' or ':' are refused because overlay would parse them as option
// or layer separators (option injection, e.g. a second upperdir=).
package rootfs

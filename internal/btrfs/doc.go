// Package btrfs wraps the few btrfs operations berth needs as ioctls from
// Go (linux/btrfs.h; the UAPI is stable): create, snapshot and delete a
// subvolume, enable quota groups, set and read a quota group's limit, and
// loop-mount a btrfs image file (formatted once with mkfs.btrfs from
// btrfs-progs). rootfs uses it for the sandboxes' writable layers and
// volume for named volumes; neither runs btrfs-progs on a hot path.
package btrfs

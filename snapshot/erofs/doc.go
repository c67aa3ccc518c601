// Package erofs writes EROFS filesystem images from an OCI layer tar stream,
// so that a snapshot layer is one file the kernel mounts read-only instead
// of a tree of thousands of files unpacked on the host.
//
// # Format written
//
// Uncompressed EROFS (Linux >= 5.4 reads it; file-backed mounts need 6.12),
// 4 KiB blocks, no compression, no shared xattrs, no extra devices:
//
//	block 0              the superblock at byte 1024
//	blocks 1..           regular file and symlink data, one contiguous run
//	                     per file (FLAT_PLAIN), in tar order; all-zero blocks
//	                     are left as holes of the image file
//	then                 directory blocks (FLAT_PLAIN)
//	then (meta_blkaddr)  the inodes: 64-byte extended inodes (32-bit ids,
//	                     nanosecond mtimes), root first, breadth-first;
//	                     files of up to 2 KiB and short symlinks are stored
//	                     inline right after their inode (FLAT_INLINE), never
//	                     across a block boundary
//
// The image is in overlay lower form, like image.Unpack's output: an OCI
// whiteout `.wh.NAME` becomes a 0:0 character device NAME and
// `.wh..wh..opq` the inline xattr trusted.overlay.opaque=y on its
// directory; no other xattr is written.
//
// # Hostile input
//
// The tar stream is treated exactly as image.Unpack treats it (names with
// NUL or climbing above the root refused, no device nodes other than the
// whiteout, xattrs dropped, entry and size caps, hardlinks only to
// earlier non-directory entries), with one difference that follows from
// building in memory: a name whose parent is a symlink in the layer is
// refused rather than resolved inside the root (berth's own captures never
// produce one). Nothing is written outside the image file, and the same
// stream always gives the same image bytes.
package erofs

// Package snapshot turns a sandbox's writable layer into an immutable,
// content-addressed filesystem layer and back (DESIGN.md decision 6,
// "snapshots are layers").
//
//   - Capture writes an overlay upper dir as an OCI layer (tar+zstd):
//     overlay whiteouts become `.wh.` entries, opaque dirs get
//     `.wh..wh..opq`. The upper is written by the sandbox, so it is hostile
//     input: Capture never follows a symlink (every step is an *at call on
//     a directory fd with O_NOFOLLOW), bounds depth and entry count, and
//     refuses a result restore would refuse (compression-bomb guard).
//   - Cache turns a snapshot blob into a read-only directory once per host:
//     verify the sha256 of the whole blob before any byte is decompressed,
//     cap what it decompresses to, unpack with image.Unpack (the same
//     hostile-input unpacker as image layers) into a temp dir and rename it
//     into place. The directory is then an overlay lower for any number of
//     sandboxes (fork = N sandboxes sharing one lower, no copy).
//   - Squash merges a chain of snapshot layers into one.
//
// # Chains and MaxChain
//
// A restored sandbox's upper holds only what changed since the restore, so
// a snapshot of it is incremental: a new layer whose parent is the layer it
// was restored from, and restore mounts the whole chain. The chain is kept
// at most MaxChain layers long; a longer one is squashed. Overlay itself
// stacks up to 500 lowers, but the lowerdir option is one page of mount(2)
// data (4095 bytes) shared with the image layers and the upper/work paths,
// and every extra lower costs a lookup per path component on every miss
// (negative lookups walk all layers), so deep chains slow down every open()
// in the sandbox. Sixteen keeps the option string short and lookups cheap
// while squashing only every 16th snapshot.
//
// IDs and metadata (base image digest, parent, size, sha256, TTL) are the
// controller's; this package provides NewID and the layer mechanics only.
package snapshot

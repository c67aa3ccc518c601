// Package image is berth's local OCI image and layer store: it pulls images
// from registries (pinned by manifest digest), imports `docker save` and
// OCI-layout tarballs, builds the default debian-trixie base image with
// debootstrap, keeps blobs content-addressed under <root>/blobs/sha256, maps
// names and pulled references to digests, and unpacks each layer once per
// host into a short read-only directory used as an overlayfs lower dir.
//
// In a cluster (SetShared) it also publishes every image it builds, pulls
// or imports to the shared blob store and fetches from there, verified by
// digest, the images a start needs that this host lacks (share.go).
//
// Layer tars are hostile input. Unpack (also used by snapshots) resolves
// every parent path with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS|
// RESOLVE_NO_XDEV) relative to a directory fd of the destination, and
// creates the last component with *at syscalls that never follow it, so a
// symlink planted earlier in the stream (`e -> /etc`, then `e/passwd`: the
// "zip slip" class, CVE-2018-15664-style path resolution on the host) can
// only ever lead back into the destination. See unpack.go for the rules.
package image

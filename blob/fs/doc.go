// Package fs is the single-host blob store: one directory on local disk.
//
// Layout under the store directory:
//
//	blobs/<key>.blob~   one file per blob: a 48-byte header (magic, size,
//	                    sha256) followed by the content
//	tmp/                Puts in flight; emptied by New
//
// Every data file name ends in "~", a byte no key may contain, so the file
// for key "a" can never collide with the directory for key "a/b".
//
// Keeping the digest in a header of the same file (not a sidecar file or an
// xattr) means one rename publishes content and digest together: a reader
// can never pair new bytes with an old digest, and the digest survives
// copies by tools that drop xattrs. Put streams into tmp/, fsyncs, renames
// into place and fsyncs the directory, so a crash leaves either the old
// blob or the new one, never a torn file. All file access goes through an
// os.Root, so a symlink planted inside the store cannot redirect a write
// outside it (the CVE-2018-15664 class of symlink races).
package fs

package blob

import (
	"context"
	"io"
)

// Info describes one stored blob.
type Info struct {
	Key    string
	Size   int64
	SHA256 string // hex digest of the content, checked on every read
}

// Store keeps immutable blobs by key. Implementations must make a blob
// visible only once it is complete (no half-written object is ever listed
// or readable), and must verify the content's sha256 on every read: Get's
// reader returns an error instead of EOF when the bytes do not match.
//
// Keys are slash-separated names of 1..900 bytes drawn from [A-Za-z0-9._/-],
// with no empty, "." or ".." segment and segments of at most 240 bytes;
// every method rejects other keys as invalid-argument. A key may also be a
// prefix of other keys ("a" and "a/b" can coexist).
//
// The recorded digest guards against corruption and tampering of stored
// bytes alone; callers that need authenticity compare Info.SHA256 with a
// digest they keep elsewhere (snapshot metadata in the state store), or pass
// it to Put as wantSHA256.
type Store interface {
	// Put streams r to key and returns its size and sha256. If wantSHA256
	// is not empty and the content differs, nothing is stored and an
	// errdefs invalid-argument error is returned. An existing key is
	// replaced atomically.
	Put(ctx context.Context, key string, r io.Reader, wantSHA256 string) (Info, error)
	// Get opens key for reading. Missing keys are errdefs not-found.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat returns a blob's info without reading it.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the blobs whose keys start with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Info, error)
}

package check

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	// MaxKeyLen is the longest key, in bytes. S3 allows 1024-byte object
	// names; the S3 store adds its prefix and a suffix, so keys keep 124
	// bytes of room for them.
	MaxKeyLen = 900
	// MaxSegmentLen bounds one slash-separated segment so that the fs
	// store's file name (segment plus a short suffix) stays under the
	// 255-byte NAME_MAX of every Linux filesystem.
	MaxSegmentLen = 240
)

func allowed(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-' || c == '/'
}

// Key reports whether key is a valid blob key: 1..1024 bytes of
// [A-Za-z0-9._/-], slash-separated, without a leading or trailing slash,
// empty segments, or "." / ".." segments.
func Key(key string) error {
	if key == "" {
		return errdefs.InvalidArgument("blob key is empty")
	}
	if err := chars("blob key", key); err != nil {
		return err
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "":
			return errdefs.InvalidArgument("blob key %q has an empty segment (leading, trailing or double slash)", key)
		case seg == "." || seg == "..":
			return errdefs.InvalidArgument("blob key %q has a %q segment; keys must not navigate directories", key, seg)
		case len(seg) > MaxSegmentLen:
			return errdefs.InvalidArgument("blob key %q has a segment longer than %d bytes", key, MaxSegmentLen)
		}
	}
	return nil
}

// Prefix reports whether p is a valid List prefix: empty, or a string made
// of key characters that does not start with a slash or contain "..".
// A prefix need not be a whole key ("snapshots/ab" is fine).
func Prefix(p string) error {
	if p == "" {
		return nil
	}
	if err := chars("blob prefix", p); err != nil {
		return err
	}
	if strings.HasPrefix(p, "/") || strings.Contains(p, "//") {
		return errdefs.InvalidArgument("blob prefix %q has an empty segment", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return errdefs.InvalidArgument("blob prefix %q has a \"..\" segment", p)
		}
	}
	return nil
}

func chars(what, s string) error {
	if len(s) > MaxKeyLen {
		return errdefs.InvalidArgument("%s is %d bytes; the limit is %d", what, len(s), MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if !allowed(s[i]) {
			return errdefs.InvalidArgument("%s %q has byte %q at offset %d; only [A-Za-z0-9._/-] is allowed", what, s, s[i], i)
		}
	}
	return nil
}

// Digest reports whether s is a lowercase hex sha256 (the only form the
// stores record and compare).
func Digest(s string) error {
	if len(s) != sha256.Size*2 {
		return errdefs.InvalidArgument("sha256 %q is not 64 hex characters", s)
	}
	if _, err := hex.DecodeString(s); err != nil || strings.ToLower(s) != s {
		return errdefs.InvalidArgument("sha256 %q is not lowercase hex", s)
	}
	return nil
}

// Corrupt is the error a store returns when stored bytes no longer match
// their recorded digest or size.
func Corrupt(key, why string) error {
	return errdefs.Internal("blob %s is corrupt: %s", key, why)
}

// Hasher counts and hashes everything read through it.
type Hasher struct {
	R io.Reader
	N int64
	h hash.Hash
}

// NewHasher wraps r.
func NewHasher(r io.Reader) *Hasher { return &Hasher{R: r, h: sha256.New()} }

func (h *Hasher) Read(p []byte) (int, error) {
	n, err := h.R.Read(p)
	h.h.Write(p[:n])
	h.N += int64(n)
	return n, err
}

// Sum returns the hex sha256 of the bytes read so far.
func (h *Hasher) Sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// verifier hashes content as it is read and turns the final EOF into an
// error when the content does not match what was recorded at Put.
type verifier struct {
	h    *Hasher
	c    io.Closer
	key  string
	size int64
	sha  string
	err  error // sticky: once verification fails, every Read fails
}

// NewReader returns a reader over rc that fails instead of returning EOF
// when the bytes differ from size/sha. It also fails as soon as more than
// size bytes arrive, so a grown file is caught without reading it all.
func NewReader(rc io.ReadCloser, key string, size int64, sha string) io.ReadCloser {
	return &verifier{h: NewHasher(rc), c: rc, key: key, size: size, sha: sha}
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.h.Read(p)
	if v.h.N > v.size {
		v.err = Corrupt(v.key, "more bytes than the recorded size")
		return 0, v.err
	}
	if errors.Is(err, io.EOF) {
		switch {
		case v.h.N != v.size:
			v.err = Corrupt(v.key, "truncated: fewer bytes than the recorded size")
		case v.h.Sum() != v.sha:
			v.err = Corrupt(v.key, "sha256 mismatch (recorded "+v.sha+", read "+v.h.Sum()+")")
		default:
			v.err = io.EOF
		}
		// Bytes of a corrupt blob must not be mistaken for a clean tail:
		// hand back the last chunk only when it verified.
		if v.err != io.EOF {
			return 0, v.err
		}
		return n, v.err
	}
	if err != nil {
		v.err = err
	}
	return n, err
}

func (v *verifier) Close() error { return v.c.Close() }

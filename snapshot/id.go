package snapshot

import (
	"crypto/rand"
	"encoding/hex"
)

// MaxChain is the longest chain of snapshot layers restore mounts; a
// snapshot whose chain would be longer is squashed (see the package doc).
const MaxChain = 16

// NewID returns a new random snapshot id, "snap_" and 16 hex digits.
func NewID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("snapshot: crypto/rand failed: " + err.Error()) // never on Linux >= 3.17
	}
	return "snap_" + hex.EncodeToString(b[:])
}

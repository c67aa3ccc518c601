package store

import (
	"encoding/json"

	"github.com/berth-sh/berth/internal/errdefs"
)

// DecodeSandbox reads a sandbox record stored as its JSON document, with
// the version the store keeps beside it. Both stores keep records this
// way; a document that does not parse is an internal error, never a
// half-read record.
func DecodeSandbox(doc string, version int64) (Sandbox, error) {
	var sb Sandbox
	if err := json.Unmarshal([]byte(doc), &sb); err != nil {
		return sb, errdefs.Internal("corrupt sandbox record: %w", err)
	}
	sb.Version = version
	return sb, nil
}

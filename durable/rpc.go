package durable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/berth-sh/berth/policy"
)

// TenantID is the id an RPC caller's id names: objects are per tenant, so
// two tenants calling (class, "ws1") reach two different objects (with
// their own storage, alarm and container), and neither can reach the
// other's. The operator's key (no tenant) uses ids as given.
func TenantID(tenant, id string) string {
	if tenant == "" {
		return id
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t" + hex.EncodeToString(sum[:5]) + "." + id
}

// CallObject is Call for an RPC caller (control.Objects): the id is taken
// within the caller's tenant (TenantID).
func (h *Host) CallObject(ctx context.Context, class, id, method string, args json.RawMessage) (json.RawMessage, error) {
	if len(id) > 128 {
		return nil, InvalidArgument("object id is longer than 128 bytes")
	}
	return h.Call(ctx, Address{Class: class, ID: TenantID(policy.TenantFrom(ctx), id)}, method, args)
}

// ObjectJournalName is the journal stream of an object: its container's
// sandbox name (control.Objects).
func (h *Host) ObjectJournalName(ctx context.Context, class, id string) string {
	return SandboxName(Address{Class: class, ID: TenantID(policy.TenantFrom(ctx), id)})
}

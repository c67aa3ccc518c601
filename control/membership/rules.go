package membership

import (
	"os"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Defaults for Config.
const (
	DefaultInterval = 2 * time.Second
	DefaultStale    = 10 * time.Second
)

// Alive is the one liveness rule: a node is alive while now minus its
// last heartbeat is within stale. Both times are the store's clock
// (store.Cluster.Now and store.Node.Heartbeat), never the caller's, so a
// node with a wrong clock cannot keep itself alive or make others look
// dead. Placement and the API both ask this function.
func Alive(heartbeat, now time.Time, stale time.Duration) bool {
	return now.Sub(heartbeat) <= stale
}

// Health is Alive as the API names it: api.NodeAlive or api.NodeStale.
func Health(heartbeat, now time.Time, stale time.Duration) string {
	if Alive(heartbeat, now, stale) {
		return api.NodeAlive
	}
	return api.NodeStale
}

// ValidateTiming checks a heartbeat interval against the stale bound. The
// interval must be under half the bound, so that one lost or slow
// heartbeat never makes a live node look dead.
func ValidateTiming(interval, stale time.Duration) error {
	if interval <= 0 || stale <= 0 {
		return errdefs.InvalidArgument("node heartbeat interval (%s) and stale bound (%s) must be positive", interval, stale)
	}
	if interval >= stale/2 {
		return errdefs.InvalidArgument("node heartbeat interval %s must be under half the stale bound %s (one missed heartbeat must not make a node stale)", interval, stale)
	}
	return nil
}

// ParseRole turns --role into the entry's Roles: "all" (or "") is both
// control and node, "control" and "node" are one each.
func ParseRole(role string) ([]string, error) {
	switch role {
	case "", "all":
		return []string{api.RoleControl, api.RoleNode}, nil
	case api.RoleControl:
		return []string{api.RoleControl}, nil
	case api.RoleNode:
		return []string{api.RoleNode}, nil
	}
	return nil, errdefs.InvalidArgument("--role %q: want all, control or node", role)
}

// ParseLabels turns repeated --node-label K=V values into labels, by the
// rule sandbox labels follow (api.ValidateLabels). A key given twice is
// refused: which value was meant cannot be told.
func ParseLabels(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, errdefs.InvalidArgument("--node-label %q: want KEY=VALUE", kv)
		}
		if _, dup := out[k]; dup {
			return nil, errdefs.InvalidArgument("--node-label %q: label %q given twice", kv, k)
		}
		if err := api.ValidateLabel(k, v); err != nil {
			return nil, errdefs.InvalidArgument("--node-label %q: %w", kv, err)
		}
		out[k] = v
	}
	if err := api.ValidateLabels(out); err != nil {
		return nil, errdefs.InvalidArgument("--node-label: %w", err)
	}
	return out, nil
}

// DefaultName is the node name when --node-name is not given: the
// machine's host name, lower-cased (host names are case-insensitive and
// node names are lower-case).
func DefaultName() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", errdefs.Unavailable("node name: read the host name: %w (pass --node-name)", err)
	}
	name := strings.ToLower(h)
	if err := api.ValidateNodeName(name); err != nil {
		return "", errdefs.InvalidArgument("node name from the host name: %w (pass --node-name)", err)
	}
	return name, nil
}

package api

import (
	"regexp"
	"time"

	"github.com/berth-sh/berth/internal/errdefs"
)

// A node's health as GET /v1/nodes reports it: alive while its last
// heartbeat is within the stale bound (berth serve --node-stale), stale
// after. A stale node takes no placements.
const (
	NodeAlive = "alive"
	NodeStale = "stale"
)

// Node roles (berth serve --role): a process is both unless told.
const (
	RoleControl = "control"
	RoleNode    = "node"
)

// Node is one berth process of the cluster as GET /v1/nodes shows it:
// its own claim (what it offers and holds, as of its last heartbeat) plus
// what the control plane derives (health, heartbeat age, the sandboxes
// placed on it).
type Node struct {
	Name  string   `json:"name"`
	Addr  string   `json:"addr"` // node API base URL; "" on a single host
	Roles []string `json:"roles"`
	// Capacity is what the node offers; Committed what the sandboxes it
	// runs were given (disk: every sandbox whose files it keeps).
	Capacity  NodeResources `json:"capacity"`
	Committed NodeResources `json:"committed"`
	// InFlight counts creates and wakes in progress on the node.
	InFlight  int               `json:"inFlight"`
	Isolation []string          `json:"isolation"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Sandboxes counts the sandbox records placed on the node, in any
	// state (a sleeping sandbox's files are kept there).
	Sandboxes int `json:"sandboxes"`
	// Running and Sleeping split Sandboxes by state (running counts
	// starting ones too). On a draining node they are the drain's
	// progress: the node sleeps its running sandboxes, and each sleeping
	// one moves to another node on its next request, so both fall to 0
	// except for sandboxes whose files cannot leave the node (persist
	// none, or no shared blob store).
	Running  int `json:"running"`
	Sleeping int `json:"sleeping"`
	// Images are the image digests the node holds unpacked; Layers the
	// snapshot layers in its cache (sha256 hex → compressed bytes) and
	// LayerBytes their sum.
	Images     []string         `json:"images"`
	Layers     map[string]int64 `json:"layers,omitempty"`
	LayerBytes int64            `json:"layerBytes"`
	Draining   bool             `json:"draining"`
	// Epoch counts the node's joins (each process start is one).
	Epoch     int64     `json:"epoch"`
	StartedAt time.Time `json:"startedAt"`
	Heartbeat time.Time `json:"heartbeat"`
	// HeartbeatAgeMs is the store's now minus Heartbeat, in the store's
	// clock; Health is NodeAlive or NodeStale by the stale bound.
	HeartbeatAgeMs int64  `json:"heartbeatAgeMs"`
	Health         string `json:"health"`
}

// NodeResources is an amount of compute: CPU in millicores, memory and
// disk in bytes.
type NodeResources struct {
	MilliCPU    int64 `json:"milliCpu"`
	MemoryBytes int64 `json:"memoryBytes"`
	DiskBytes   int64 `json:"diskBytes"`
}

// NodeList is the body of GET /v1/nodes. StaleAfterMs is the bound the
// health of each node was judged by.
type NodeList struct {
	Nodes        []Node `json:"nodes"`
	StaleAfterMs int64  `json:"staleAfterMs"`
}

// Node names are host names: lower-case DNS names, dots allowed, so the
// default (the machine's host name) is one.
var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

// ValidateNodeName returns an invalid-argument error unless name is a
// valid node name.
func ValidateNodeName(name string) error {
	if !nodeNameRE.MatchString(name) {
		return errdefs.InvalidArgument("invalid node name %q: use 1-253 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

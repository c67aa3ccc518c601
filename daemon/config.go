package daemon

import (
	"time"

	"github.com/berth-sh/berth/durable"
)

// Config is everything `berth serve` needs. Zero values take the defaults
// noted on each field (see Defaults).
type Config struct {
	Listen string // 127.0.0.1:7070
	// Metrics configures /metrics and the usage sampler (metrics.go).
	Metrics MetricsConfig
	// Webhooks are the operator's lifecycle webhooks (webhooks.go).
	Webhooks WebhookConfig
	// PreviewListen serves preview URLs; PreviewHost is the public host
	// they end in (default: "localhost:<port of PreviewListen>").
	PreviewListen string // 127.0.0.1:7080
	PreviewHost   string
	DataDir       string        // /var/lib/berth
	RunDir        string        // /run/berth (sockets, netns; host-only)
	Runtime       string        // path to the OCI runtime binary; default: runc beside berth, then $PATH
	AgentBinary   string        // path to berth-agent; default: beside the berth binary
	Subnet        string        // 10.88.0.0/16
	Bridge        string        // berth0
	UpperSize     int64         // bytes for the sparse btrfs file holding writable layers; default 64 GiB
	VolumesSize   int64         // bytes for the sparse btrfs file holding named volumes (when the data dir is not on btrfs); default 64 GiB
	AlarmTick     time.Duration // how often due alarms are checked; default 1s
	// UserNSBase is the first host uid/gid handed to sandboxes; each gets
	// its own 65536 ids from there (default 2^28). Daemons sharing a host
	// need disjoint bases.
	UserNSBase uint32
	// Runsc is the gVisor runtime for sandboxes with isolation "gvisor";
	// default: runsc beside berth, then $PATH; none found = runc only.
	Runsc string
	// DefaultIsolation is used when a create request names none ("runc").
	DefaultIsolation string
	// E2BTemplates is a JSON file {"template-id": "image"} of E2B template
	// IDs beyond the defaults (base, code-interpreter-v1); default
	// <data>/e2b-templates.json, read if it exists.
	E2BTemplates string
	Blobs        BlobConfig
	Egress       EgressConfig
	// Cluster is a PostgreSQL DSN: the state store lives there instead of
	// in SQLite under DataDir (cluster mode). It holds a password, so it
	// is never logged. Empty: the file ClusterFile names, else
	// $BERTH_CLUSTER_DSN (ClusterDSNEnv), else SQLite.
	Cluster string
	// ClusterFile is a file holding the DSN (one line; a Kubernetes
	// Secret mounted as a file, say), so that it is in neither argv nor
	// the environment. Giving it beside Cluster is an error.
	ClusterFile string
	// Classes registers durable-object classes (package durable) before
	// the daemon serves; programs that embed berth set it. Nil: none.
	Classes func(h *durable.Host) error
	// PolicyFile is the operator policy (YAML, package policy); empty:
	// no policy beyond berth's built-in limits.
	PolicyFile string
	// JournalRetention is how long journal entries (and so idempotent
	// replays) are kept; default 30 days.
	JournalRetention time.Duration
	// MaxConns and MaxConnsPerIP cap open connections to the API (and,
	// separately, to the preview listener) in total and per client
	// address; defaults server.DefaultMaxConns, DefaultMaxConnsPerIP.
	MaxConns, MaxConnsPerIP int
	// RequestLog chooses the request log lines on stderr: "all" (the
	// default), "errors" (status 400 and above) or "off".
	RequestLog string
	// APIKeyFile holds the user API key; default <data>/api-key, created
	// (0600) on first start when absent. In a cluster every member must
	// be given the same one: a user's key works on any node. A file given
	// here that exists is never replaced: one with a key shorter than
	// minAPIKey is a start-up error.
	APIKeyFile string
	// Node is the node API: this machine's node served to other berth
	// processes (package node/remote), and how this process reaches
	// theirs. Off unless NodeListen is set.
	Node   NodeAPIConfig
	Member NodeConfig
	// Pools are this node's warm pools, each IMAGE=SIZE[,instance=TYPE]
	// (local.ParsePoolSpec; berth serve --pool), after the operator
	// policy's.
	Pools []string
	// PoolMemoryMiB bounds the memory all warm pools' idle members may
	// hold, each counted at local.DefaultPoolMemberMiB (berth serve
	// --pool-memory); 0: no budget.
	PoolMemoryMiB int64
	// StartLimit, StartQueue and StartWait bound bursts of starts
	// (local.GateConfig): how many run at once (default 2 per CPU), how
	// many may wait (default 1024; -1 none) and for how long (default
	// 30 s); past those a start is answered 429 with Retry-After.
	StartLimit, StartQueue int
	StartWait              time.Duration
	// SleepMode is the sleep mode of sandboxes created without one
	// (berth serve --sleep-mode; "" = api.SleepStop). FreezeMax and
	// FreezeMemoryMiB bound the freeze tier (--freeze-max,
	// --freeze-memory; 0: no bound): past them a frozen sandbox, oldest
	// first, escalates to checkpoint or stop.
	SleepMode       string
	FreezeMax       time.Duration
	FreezeMemoryMiB int64
}

// NodeConfig is this process's membership in its cluster (package
// control/membership): its entry's name, role and labels, and how often
// it heartbeats and when a silent node counts as stale.
type NodeConfig struct {
	Name string // default: the host name, lower-cased
	// Role is all (the default), control or node. It is only recorded in
	// the entry for now: every process still serves both.
	Role   string
	Labels []string      // K=V, the sandbox label rule
	Beat   time.Duration // heartbeat interval; default 2s
	Stale  time.Duration // a node is stale past this; default 10s
	// OwnerCache and NodeCache bound the forwarder's route caches
	// (control/forward Config.OwnerCacheAge and NodeCacheAge): 0 is
	// their default (2 s, 1 s), negative reads the store on every
	// request.
	OwnerCache time.Duration
	NodeCache  time.Duration
}

// NodeAPIConfig configures the node API (see nodeapi.go).
type NodeAPIConfig struct {
	// Listen is the address the node API is served on; "" (the default
	// on a single host): not served.
	Listen string
	// TokenFile holds the cluster credential every node API request
	// carries (not the user API key); default <data>/cluster-token,
	// created with mode 0600 on first start when absent.
	TokenFile string
	// TLSCert and TLSKey are the PEM certificate and key the node API is
	// served with; both or neither. Without them the node API is plain
	// HTTP, which is refused on an address that is not loopback unless
	// Insecure.
	TLSCert, TLSKey string
	// CA is a PEM file of the roots this process verifies other nodes'
	// certificates against (NodeClient); empty: the system's roots.
	CA string
	// Advertise is the node API's URL in this member's entry, what other
	// members dial (http(s)://host:port); default: the listener's own,
	// which must then name one address (not every interface).
	Advertise string
	// Insecure allows plain HTTP to and from addresses that are not
	// loopback (a network the operator trusts, or TLS ended in front).
	Insecure bool
}

// ClusterDSNEnv names the variable Config.Cluster defaults to: a DSN
// there stays off the command line, which every local user can read in
// /proc.
const ClusterDSNEnv = "BERTH_CLUSTER_DSN"

// EgressConfig configures the egress proxy and resolver (package egress).
type EgressConfig struct {
	ProxyPort uint16 // on the bridge address; default 3129
	DNSPort   uint16 // on the bridge address; default 53
	// Upstream is the DNS server names are resolved with (host:port);
	// default: the first nameserver of the host's /etc/resolv.conf.
	Upstream string
	// OpenPrivate are private CIDRs sandboxes may reach when their policy
	// allows (by default every private range is blocked).
	OpenPrivate []string
	// UpstreamCA is a PEM file of extra roots trusted when the proxy
	// re-originates TLS (a private PKI, or a test's CA).
	UpstreamCA string
}

// BlobConfig chooses the blob store for snapshots, backups and shared
// images: a local directory (<data>/blobs) unless an S3 endpoint is set.
type BlobConfig struct {
	S3Endpoint  string // host:port or http(s)://host:port
	S3Bucket    string
	S3Region    string
	S3Prefix    string
	S3AccessKey string // from $BERTH_S3_ACCESS_KEY when empty
	S3SecretKey string // from $BERTH_S3_SECRET_KEY when empty
	// NoImages keeps images out of the S3 store. By default, with S3,
	// every image built, pulled or imported here is published there and
	// a start that needs an image this node lacks fetches it from there
	// (image.Store.SetShared). A local blob dir never shares images: no
	// other node reads it.
	NoImages bool
}

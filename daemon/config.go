package daemon

import (
	"time"

	"github.com/berth-sh/berth/durable"
)

// Config is everything `berth serve` needs. Zero values take the defaults
// noted on each field (see Defaults).
type Config struct {
	Listen string // 127.0.0.1:7070
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
	// Classes registers durable-object classes (package durable) before
	// the daemon serves; programs that embed berth set it. Nil: none.
	Classes func(h *durable.Host) error
	// PolicyFile is the operator policy (YAML, package policy); empty:
	// no policy beyond berth's built-in limits.
	PolicyFile string
	// JournalRetention is how long journal entries (and so idempotent
	// replays) are kept; default 30 days.
	JournalRetention time.Duration
}

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

// BlobConfig chooses the blob store for snapshots and backups: a local
// directory (<data>/blobs) unless an S3 endpoint is set.
type BlobConfig struct {
	S3Endpoint  string // host:port or http(s)://host:port
	S3Bucket    string
	S3Region    string
	S3Prefix    string
	S3AccessKey string // from $BERTH_S3_ACCESS_KEY when empty
	S3SecretKey string // from $BERTH_S3_SECRET_KEY when empty
}

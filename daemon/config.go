package daemon

import "time"

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
	Blobs         BlobConfig
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

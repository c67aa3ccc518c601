package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/daemon"
	"github.com/berth-sh/berth/node/local"
)

// runDaemon is a variable so tests can check the flag wiring without
// starting a daemon.
var runDaemon = daemon.Run

func (a *app) serveCmd() *cobra.Command {
	var cfg daemon.Config
	var s3Images bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the berth server (as root)",
		Long: `Run the berth daemon: the HTTP API, the sandbox controller and everything
it manages (containers, overlay filesystems, the sandbox network).

It must run as root. It keeps its state in --data (database, images,
sandbox layers) and writes <data>/client.json with its URL and API key, so
berth client commands on this host find it without flags. Sandboxes keep
running when the server stops; the next start adopts them.

It prints the API key at start only when stderr is a terminal; otherwise
(a log file) it prints the key's first characters. Every request gets one
log line on stderr (see --request-log) and an id, returned in the
X-Request-Id header and in every error body.

Every berth process is a node of its cluster (a single host is a cluster
of one): it writes its entry (capacity, what is committed, images and
snapshot layers held, isolation backends, labels) on start and every
--node-heartbeat, and 'berth node ls' lists the entries. A node silent for
longer than --node-stale is stale and takes no new sandboxes. With
--role control a member serves the API but runs no sandboxes (placement
skips it, and it takes over none); --role node runs them.

The API listens on loopback by default. Listening on another address
exposes it to that network, protected only by the API key.

--cluster keeps the state (sandbox records, journal, durable objects'
storage and alarms, snapshot and backup records, secrets) in PostgreSQL
instead of <data>/state.db, the first step of cluster mode. The schema is
created or upgraded at start. A server that cannot be reached fails start-up
naming its host; later, while it is down, requests fail with 503 and nothing
is recorded. The DSN's password is never logged, but a command line is
readable by every local user: give the password in a ~/.pgpass file or
$PGPASSWORD, the whole DSN in a file named by --cluster-file (a
Kubernetes Secret mounted as a file, say), or in $BERTH_CLUSTER_DSN (a
systemd EnvironmentFile, say). Whoever administers that database can read and
change all of berth's state, secrets included.

--node-listen serves this machine's node to other berth processes (the
node API), under a cluster credential that is not the API key (the
--cluster-token-file). Beyond loopback it needs TLS (--node-tls-cert and
--node-tls-key) or an explicit --node-insecure.

Cluster mode (--cluster with --s3-endpoint) makes this process one member
of a cluster: any member answers for any sandbox, forwarding to the node
that runs it over that node's --node-listen (required for the node role),
and creates are placed on the member that scores best (image and snapshot
layers held, free capacity, creates in flight). Every member needs the
same --api-key-file and --cluster-token-file. A sandbox whose node is
silent past --node-stale moves, on its next request, to the node
placement chooses and wakes there from its last sleep (in a cluster every sleep persists to S3);
its changes since then and its processes are lost. A member that comes
back after that stops its stale containers without writing. Try it on one
machine with scripts/cluster.sh up.

Examples:
  sudo berth serve
  sudo berth serve --listen 127.0.0.1:8080 --data /srv/berth
  sudo berth serve --subnet 10.99.0.0/16 --runtime /usr/local/bin/runc
  sudo BERTH_S3_ACCESS_KEY=... BERTH_S3_SECRET_KEY=... berth serve --s3-endpoint https://s3.example.com --s3-bucket snaps
  sudo berth serve --cluster 'postgres://berth@db.internal:5432/berth?sslmode=verify-full'   # password in root's ~/.pgpass
  sudo berth serve --node-name worker-1 --node-label zone=eu-1 --node-label disk=ssd
  sudo BERTH_CLUSTER_DSN=... berth serve --node-name n2 --listen 10.0.0.12:7070 --node-listen 10.0.0.12:7071 \
    --node-tls-cert node.pem --node-tls-key node-key.pem --node-ca ca.pem --s3-endpoint https://s3.internal \
    --api-key-file /etc/berth/api-key --cluster-token-file /etc/berth/cluster-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.DataDir = client.DataDir(a.dataDir)
			cfg.Blobs.NoImages = !s3Images
			// On the command line 0 means no cache; in Config, the default.
			for _, d := range []*time.Duration{&cfg.Member.OwnerCache, &cfg.Member.NodeCache} {
				if *d == 0 {
					*d = -1
				}
			}
			return runDaemon(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "address for the HTTP API")
	f.StringVar(&cfg.Cluster, "cluster", "", "PostgreSQL DSN for the state store (postgres://USER@HOST:PORT/DB?sslmode=verify-full); default: --cluster-file, else $"+daemon.ClusterDSNEnv+", else SQLite in --data")
	f.StringVar(&cfg.ClusterFile, "cluster-file", "", "file holding the --cluster DSN on one line, kept out of argv and the environment (not with --cluster)")
	f.StringVar(&cfg.Runtime, "runtime", "", "OCI runtime binary (default: runc beside berth, then $PATH)")
	f.StringVar(&cfg.AgentBinary, "agent", "", "berth-agent binary (default: beside berth, then $PATH)")
	f.StringVar(&cfg.Subnet, "subnet", "10.88.0.0/16", "IPv4 subnet for sandbox addresses")
	f.StringVar(&cfg.PreviewListen, "preview-listen", "127.0.0.1:7080", "address for preview URLs (host form and /preview/ path form)")
	f.StringVar(&cfg.PreviewHost, "preview-host", "", "public host preview URLs end in (default: localhost:<preview port>)")
	f.StringVar(&cfg.E2BTemplates, "e2b-templates", "", "JSON file mapping E2B template IDs to images (default: <data>/e2b-templates.json if it exists)")
	f.StringVar(&cfg.RunDir, "run-dir", "/run/berth", "host-only runtime directory (sockets, bundles, netns); its base name also names the cgroup parent")
	f.StringVar(&cfg.Bridge, "bridge", "berth0", "bridge for sandbox networking; also names the nftables table")
	f.DurationVar(&cfg.AlarmTick, "alarm-tick", time.Second, "how often idle sandboxes are checked for sleepAfter")
	f.DurationVar(&cfg.JournalRetention, "journal-retention", 30*24*time.Hour, "how long journal entries (and idempotent replays) are kept")
	f.StringVar(&cfg.PolicyFile, "policy", "", "operator policy file (YAML: image allowlist, per-tenant limits); check it with 'berth policy check'")
	f.StringVar(&cfg.Blobs.S3Endpoint, "s3-endpoint", "", "S3-compatible endpoint for snapshots, backups and (see --s3-images) the images nodes share (host:port or URL); default: a local dir under --data")
	f.StringVar(&cfg.Blobs.S3Bucket, "s3-bucket", "berth", "S3 bucket")
	f.BoolVar(&s3Images, "s3-images", true, "with --s3-endpoint: publish every image built, pulled or imported here to S3 (images/ in the bucket) and fetch from there, verified by digest, the images a start needs that this node lacks")
	f.StringVar(&cfg.Blobs.S3Region, "s3-region", "us-east-1", "S3 region")
	f.StringVar(&cfg.Blobs.S3Prefix, "s3-prefix", "", "key prefix inside the bucket (ends in /)")
	f.Uint16Var(&cfg.Egress.ProxyPort, "egress-proxy-port", 3129, "port on the bridge address where the egress proxy takes sandboxes' TCP")
	f.Uint16Var(&cfg.Egress.DNSPort, "egress-dns-port", 53, "port on the bridge address where berth's resolver answers sandboxes")
	f.StringVar(&cfg.Egress.Upstream, "egress-dns-upstream", "", "DNS server (host[:port]) the resolver and proxy use (default: first nameserver of /etc/resolv.conf)")
	f.StringArrayVar(&cfg.Egress.OpenPrivate, "egress-open-private", nil, "private CIDR that sandbox policies may allow (repeatable); every private range is blocked otherwise")
	f.StringVar(&cfg.Egress.UpstreamCA, "egress-upstream-ca", "", "PEM file of extra CA roots the proxy trusts when it re-originates TLS for injection")
	f.Int64Var(&cfg.UpperSize, "upper-size", 64<<30, "bytes of the sparse btrfs file that holds every sandbox's writable layer")
	f.Int64Var(&cfg.VolumesSize, "volumes-size", 64<<30, "bytes of the sparse btrfs file that holds named volumes (made when the data dir is not on btrfs)")
	f.StringVar(&cfg.Runsc, "runsc", "", "gVisor runtime for isolation \"gvisor\" (default: runsc beside berth, then $PATH)")
	f.StringVar(&cfg.DefaultIsolation, "default-isolation", "runc", "isolation for sandboxes whose create request names none: runc or gvisor")
	f.Uint32Var(&cfg.UserNSBase, "userns-base", 1<<28, "first host uid/gid of sandbox user namespaces; each sandbox gets its own 65536 ids from here (daemons sharing a host need disjoint bases)")
	f.IntVar(&cfg.MaxConns, "max-conns", 16384, "most open connections to the API (and, separately, to the preview listener); more are answered 503 and closed")
	f.IntVar(&cfg.MaxConnsPerIP, "max-conns-per-ip", 1024, "most open connections from one client address; more are answered 429 and closed")
	f.StringVar(&cfg.Node.Listen, "node-listen", "", "address for the node API (this machine's node for other berth processes, under the cluster credential); default: not served")
	f.StringVar(&cfg.APIKeyFile, "api-key-file", "", "file holding the user API key (default <data>/api-key, made with mode 0600 when absent; a given file that exists is never replaced, and a key in it shorter than 32 characters is refused); every member of a cluster needs the same one")
	f.StringVar(&cfg.Node.Advertise, "node-advertise", "", "URL other members reach this node's node API at (http(s)://host:port); default: --node-listen's, which must then name one address")
	f.StringVar(&cfg.Node.TokenFile, "cluster-token-file", "", "file holding the cluster credential of the node API, not the user API key (default <data>/cluster-token, made with mode 0600 when absent)")
	f.StringVar(&cfg.Node.TLSCert, "node-tls-cert", "", "PEM certificate the node API is served with (with --node-tls-key)")
	f.StringVar(&cfg.Node.TLSKey, "node-tls-key", "", "PEM key of --node-tls-cert")
	f.StringVar(&cfg.Node.CA, "node-ca", "", "PEM roots other nodes' certificates are verified against when this process calls their node API (default: the system's roots)")
	f.BoolVar(&cfg.Node.Insecure, "node-insecure", false, "allow the node API in plain HTTP beyond loopback (a trusted network, or TLS ended in front of berth)")
	f.StringVar(&cfg.RequestLog, "request-log", "all", "request log lines on stderr (method, route, status, duration, sandbox, tenant, request id): all, errors or off")
	f.StringVar(&cfg.Member.Name, "node-name", "", "this node's name in its cluster (default: the host name, lower-cased)")
	f.StringVar(&cfg.Member.Role, "role", "all", "this member's roles: all, control (the API only: runs no sandboxes) or node")
	f.StringArrayVar(&cfg.Member.Labels, "node-label", nil, "label KEY=VALUE on this node for placement constraints (repeatable; the sandbox label rule)")
	f.DurationVar(&cfg.Member.Beat, "node-heartbeat", 2*time.Second, "how often this node rewrites its entry; must be under half of --node-stale")
	f.DurationVar(&cfg.Member.Stale, "node-stale", 10*time.Second, "a node whose last heartbeat is older than this is stale: it takes no new sandboxes")
	f.DurationVar(&cfg.Member.OwnerCache, "route-owner-cache", forward.DefaultOwnerCacheAge, "how long a request for a sandbox running on another node is routed by the owner last read, without reading its record (the owner checks and refuses one it no longer owns; the request is then routed again); 0 reads the record on every request")
	f.DurationVar(&cfg.Member.NodeCache, "route-node-cache", forward.DefaultNodeCacheAge, "how old the owner's node entry (address, heartbeat, draining) a request is routed by may be; 0 reads it on every request")
	f.StringArrayVar(&cfg.Pools, "pool", nil, "warm pool IMAGE=SIZE[,instance=TYPE][,snapshot=ID] or IMAGE=adaptive,max=N[,min=N][,instance=TYPE][,snapshot=ID] (repeatable): keep SIZE sandboxes of IMAGE started and frozen, so that a matching create claims one in milliseconds (with instance=TYPE only creates of that type match; without, every type, its limits set at claim); an adaptive pool sizes itself from its recent create rate (a minute's worth of creates at that rate), from min (default 0) to max; with snapshot=ID the members start from that snapshot (taken on IMAGE) and serve only creates that restore it; e.g. --pool debian-trixie=4 --pool python=2,instance=basic --pool debian-trixie=adaptive,min=2,max=100,instance=standard-3")
	f.Int64Var(&cfg.PoolMemoryMiB, "pool-memory", 0, fmt.Sprintf("MiB that all warm pools' idle members may hold, each counted at %d MiB (the host memory an idle sandbox was measured to take); pools that would exceed it stay smaller, and shrink when it is reached; 0: no budget", local.DefaultPoolMemberMiB))
	f.StringVar(&cfg.SleepMode, "sleep-mode", api.SleepStop, "sleep mode of sandboxes created without --sleep: stop (today's behaviour: files kept, processes end), freeze (the cgroup freezer: memory and processes stay on this host, no CPU; a wake is a thaw) or checkpoint (refused: this node cannot checkpoint yet)")
	f.DurationVar(&cfg.FreezeMax, "freeze-max", 30*time.Minute, "longest a sandbox stays frozen before it escalates to checkpoint, or stop (files only) where this node cannot checkpoint; 0: no limit")
	f.Int64Var(&cfg.FreezeMemoryMiB, "freeze-memory", defaultFreezeMemoryMiB(), "MiB of host memory all frozen sandboxes may hold together; past it the oldest frozen escalate first (default: a quarter of host RAM; 0: no budget)")
	f.IntVar(&cfg.StartLimit, "start-limit", 0, "most sandbox starts (creates and wakes; warm pool claims excluded) that run at once; more wait in a queue fair between tenants (default 2 per CPU)")
	f.IntVar(&cfg.StartQueue, "start-queue", 1024, "most starts that may wait for a slot; more are answered 429 with Retry-After (-1: none wait)")
	f.DurationVar(&cfg.StartWait, "start-wait", 30*time.Second, "longest a start waits for a slot before it is answered 429 with Retry-After")
	f.StringVar(&cfg.Metrics.TokenFile, "metrics-token-file", "", "file holding the bearer token (16+ characters) that GET /metrics on --listen requires; without it (or --metrics-listen) /metrics answers 401 there")
	f.StringVar(&cfg.Metrics.Listen, "metrics-listen", "", "address serving GET /metrics without authentication (keep it private: a loopback or a scrape network)")
	f.DurationVar(&cfg.Metrics.History, "metrics-history", 15*time.Minute, "per-sandbox usage history kept in memory (a sample every --metrics-interval)")
	f.DurationVar(&cfg.Metrics.Interval, "metrics-interval", 5*time.Second, "time between usage samples of every running sandbox (cgroups, veth, disk quota)")
	f.StringArrayVar(&cfg.Webhooks.URLs, "webhook", nil, "http(s) URL that receives every lifecycle event as a signed JSON POST (repeatable; needs --webhook-secret-file); retried with backoff, in order, at least once; the cursor is kept under the data dir")
	f.StringVar(&cfg.Webhooks.SecretFile, "webhook-secret-file", "", "file holding the HMAC secret (16+ characters) that signs webhook deliveries (Berth-Signature: t=<unix>,v1=<hex HMAC-SHA256 of \"t.body\">)")
	f.BoolVar(&cfg.Metrics.NoUsage, "no-usage", false, "turn the usage sampler off: no per-sandbox metrics, usage records or traffic activity")
	return cmd
}

// defaultFreezeMemoryMiB is a quarter of this host's RAM.
func defaultFreezeMemoryMiB() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit) / 4 >> 20
}

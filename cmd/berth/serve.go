package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/daemon"
)

// runDaemon is a variable so tests can check the flag wiring without
// starting a daemon.
var runDaemon = daemon.Run

func (a *app) serveCmd() *cobra.Command {
	var cfg daemon.Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the berth server (as root)",
		Long: `Run the berth daemon: the HTTP API, the sandbox controller and everything
it manages (containers, overlay filesystems, the sandbox network).

It must run as root. It keeps its state in --data (database, images,
sandbox layers) and writes <data>/client.json with its URL and API key, so
berth client commands on this host find it without flags. Sandboxes keep
running when the server stops; the next start adopts them.

The API listens on loopback by default. Listening on another address
exposes it to that network, protected only by the API key.

Examples:
  sudo berth serve
  sudo berth serve --listen 127.0.0.1:8080 --data /srv/berth
  sudo berth serve --subnet 10.99.0.0/16 --runtime /usr/local/bin/runc
  sudo BERTH_S3_ACCESS_KEY=... BERTH_S3_SECRET_KEY=... berth serve --s3-endpoint https://s3.example.com --s3-bucket snaps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.DataDir = client.DataDir(a.dataDir)
			return runDaemon(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7070", "address for the HTTP API")
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
	f.StringVar(&cfg.Blobs.S3Endpoint, "s3-endpoint", "", "S3-compatible endpoint for snapshots and backups (host:port or URL); default: a local dir under --data")
	f.StringVar(&cfg.Blobs.S3Bucket, "s3-bucket", "berth", "S3 bucket")
	f.StringVar(&cfg.Blobs.S3Region, "s3-region", "us-east-1", "S3 region")
	f.StringVar(&cfg.Blobs.S3Prefix, "s3-prefix", "", "key prefix inside the bucket (ends in /)")
	f.Uint16Var(&cfg.Egress.ProxyPort, "egress-proxy-port", 3129, "port on the bridge address where the egress proxy takes sandboxes' TCP")
	f.Uint16Var(&cfg.Egress.DNSPort, "egress-dns-port", 53, "port on the bridge address where berth's resolver answers sandboxes")
	f.StringVar(&cfg.Egress.Upstream, "egress-dns-upstream", "", "DNS server (host[:port]) the resolver and proxy use (default: first nameserver of /etc/resolv.conf)")
	f.StringArrayVar(&cfg.Egress.OpenPrivate, "egress-open-private", nil, "private CIDR that sandbox policies may allow (repeatable); every private range is blocked otherwise")
	f.StringVar(&cfg.Egress.UpstreamCA, "egress-upstream-ca", "", "PEM file of extra CA roots the proxy trusts when it re-originates TLS for injection")
	f.Int64Var(&cfg.UpperSize, "upper-size", 64<<30, "bytes of the sparse btrfs file that holds every sandbox's writable layer")
	f.StringVar(&cfg.Runsc, "runsc", "", "gVisor runtime for isolation \"gvisor\" (default: runsc beside berth, then $PATH)")
	f.StringVar(&cfg.DefaultIsolation, "default-isolation", "runc", "isolation for sandboxes whose create request names none: runc or gvisor")
	f.Uint32Var(&cfg.UserNSBase, "userns-base", 1<<28, "first host uid/gid of sandbox user namespaces; each sandbox gets its own 65536 ids from here (daemons sharing a host need disjoint bases)")
	return cmd
}

package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/control/membership"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/e2b"
	"github.com/berth-sh/berth/events"
	"github.com/berth-sh/berth/imagebuild"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/metering"
	"github.com/berth-sh/berth/metrics"
	"github.com/berth-sh/berth/node/local"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/preview"
	"github.com/berth-sh/berth/server"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/web"
)

// Version is set by the build (-ldflags -X).
var Version = "dev"

// ClientConfig is what `berth serve` writes to <data>/client.json so that
// client commands on the same host find the server without flags.
type ClientConfig struct {
	URL    string `json:"url"`
	APIKey string `json:"apiKey"`
}

func (c *Config) defaults() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.DataDir == "" {
		c.DataDir = "/var/lib/berth"
	}
	if err := c.clusterDSN(); err != nil {
		return err
	}
	if c.RunDir == "" {
		c.RunDir = "/run/berth"
	}
	if c.Subnet == "" {
		c.Subnet = "10.88.0.0/16"
	}
	if c.Bridge == "" {
		c.Bridge = "berth0"
	}
	if err := c.Node.check(); err != nil {
		return err
	}
	switch c.RequestLog {
	case "", "all", "errors", "off":
	default:
		return fmt.Errorf("--request-log %q: want all, errors or off", c.RequestLog)
	}
	if c.UserNSBase != 0 && uint64(c.UserNSBase)+local.DefaultUserNSSize > 1<<31 {
		return fmt.Errorf("--userns-base %d leaves no range of %d host ids below 2^31 (%d): give a lower base", c.UserNSBase, local.DefaultUserNSSize, uint64(1)<<31)
	}
	if c.UpperSize == 0 {
		c.UpperSize = 64 << 30
	}
	if err := c.Member.defaults(); err != nil {
		return err
	}
	self, _ := os.Executable()
	if c.Runtime == "" {
		c.Runtime = findBeside(self, "runc")
	}
	if c.AgentBinary == "" {
		c.AgentBinary = findBeside(self, "berth-agent")
	}
	if c.Runtime == "" {
		return errors.New("no OCI runtime found: install runc beside berth or on $PATH, or pass --runtime")
	}
	if c.AgentBinary == "" {
		return errors.New("berth-agent not found beside the berth binary or on $PATH")
	}
	return nil
}

// findBeside looks for name next to the running binary, then on $PATH.
func findBeside(self, name string) string {
	if self != "" {
		p := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// Run starts berth serve and blocks until ctx ends. Sandboxes keep running
// when it returns; the next Run adopts them.
func Run(ctx context.Context, cfg Config) error {
	started := time.Now() // the node entry's StartedAt: a restart is a new join
	if err := cfg.defaults(); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("berth serve must run as root (it creates namespaces, cgroups and mounts)")
	}
	logf := log.New(os.Stderr, "berth: ", log.LstdFlags).Printf
	if off := weaken.Active(); len(off) > 0 {
		logf("WARNING: %s=%s switches protections OFF (test-only negative controls): %s",
			weaken.EnvVar, strings.Join(off, ","), strings.Join(off, ", "))
	}
	if err := makeDirs(cfg); err != nil {
		return err
	}
	// Protect the daemon from the OOM killer: a sandbox's hog must die,
	// not the control plane (adversarial checklist #19).
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-900"), 0o644)

	var (
		key string
		err error
	)
	if cfg.APIKeyFile == "" {
		cfg.APIKeyFile = filepath.Join(cfg.DataDir, "api-key")
		key, err = loadOrCreateKey(cfg.APIKeyFile)
	} else {
		key, err = loadGivenKey(cfg.APIKeyFile)
	}
	if err != nil {
		return err
	}
	if cfg.PreviewListen == "" {
		cfg.PreviewListen = "127.0.0.1:7080"
	}
	pln, err := net.Listen("tcp", cfg.PreviewListen)
	if err != nil {
		return fmt.Errorf("preview listener: %w", err)
	}
	defer pln.Close()
	pcfg := preview.Config{PublicHost: cfg.PreviewHost, APIKey: key, Logf: logf}
	if pcfg.PublicHost == "" {
		pcfg.PublicHost = "localhost:" + strconv.Itoa(pln.Addr().(*net.TCPAddr).Port)
	}
	previewBase := "http://" + pln.Addr().String() // path form: no wildcard DNS needed
	var pol *policy.Policy
	if cfg.PolicyFile != "" {
		if pol, err = policy.Load(cfg.PolicyFile); err != nil {
			return err
		}
		logf("policy: %s (%d allowed images, %d tenants)", cfg.PolicyFile, len(pol.Images), len(pol.Tenants))
	}
	// The state store opens first: in a cluster the preview proxy and
	// the API faces forward by its records.
	st, err := openStore(ctx, cfg, logf)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := cfg.checkCluster(); err != nil {
		return err
	}
	var (
		mgr     *local.Manager
		host    *localNode
		cw      *clusterWiring
		router  forward.Router // nil on a single host (a nil *Forwarder would not be nil)
		token   string         // the cluster credential, once the node API or the cluster needs it
		tokPath = cfg.Node.tokenPath(cfg.DataDir)
	)
	if cfg.Node.Listen != "" || cfg.clusterMode() {
		if token, err = loadOrCreateClusterToken(tokPath, logf); err != nil {
			return err
		}
	}
	if cfg.clusterMode() {
		cw = &clusterWiring{self: cfg.Member.Name, isNode: cfg.Member.isNode(), st: st, stale: cfg.Member.Stale, logf: logf}
		placer := newPlacer(st, func(ctx context.Context, ref string) string {
			if host == nil {
				return ""
			}
			return imageDigest(ctx, host.imgs, ref)
		}, pol, cfg, logf)
		fwd, err := newForwarder(cfg, token, st, placer, cw)
		if err != nil {
			return err
		}
		router = fwd
		pcfg.Forward = router
		if cfg.Blobs.S3Endpoint == "" {
			logf("WARNING: cluster mode without --s3-endpoint: snapshots and sleeping sandboxes stay in this node's own blob dir, so a sandbox cannot wake on another node when this one dies")
		}
	}
	metricsToken, err := cfg.Metrics.token()
	if err != nil {
		return err
	}
	webhookSecret, err := cfg.Webhooks.load()
	if err != nil {
		return err
	}
	reg := newRegistry(st, func() *localNode { return host })
	if cfg.Metrics.Listen != "" {
		addr, err := serveMetricsListener(ctx, cfg.Metrics.Listen, reg, logf)
		if err != nil {
			return err
		}
		logf("metrics: /metrics on %s (unauthenticated: keep it private)", addr)
	}
	prox := preview.NewProxy(preview.ResolverFunc(func(ctx context.Context, s string, p int, t string) (preview.Exposure, preview.DialFunc, error) {
		return mgr.Lookup(ctx, s, p, t)
	}), pcfg)
	host, err = openNode(ctx, &cfg, nodeWiring{
		Store:    st,
		NodeName: clusterName(cfg),
		Previews: prox,
		PreviewURLs: func(e preview.Exposure) (string, string) {
			return preview.URL(pcfg, e), preview.PathURL(previewBase, e)
		},
		Policy: pol,
		Logf:   logf,
		Meter:  reg,
	})
	if err != nil {
		return err
	}
	defer host.close()
	mgr, imgs, rfs := host.mgr, host.imgs, host.rfs
	// This machine's node, in-process; the control plane (the objects
	// and plane) reaches it only through node.Node, except for what is
	// still node-local (control.NodeLocal).
	nd := mgr.Compute(images{s: imgs}.ListImages)
	dcfg := durable.Config{Store: st, Compute: nd, AlarmTick: cfg.AlarmTick, Logf: logf}
	if cw != nil {
		dcfg.Owns = cw.owns
	}
	objects := durable.NewHost(dcfg)
	if cw != nil {
		cw.evict, cw.resident = objects.Evict, objects.Resident
		go cw.leaseLoop(ctx, leaseRenewEvery(cfg.Member.Stale))
	}
	// The built-in Sandbox class; the node calls back into its objects
	// for what it starts but the controller decides (fork, wake, journal).
	ctrls, err := controller.Attach(objects, controller.Options{})
	if err != nil {
		return err
	}
	mgr.AttachControllers(ctrls)
	if cfg.Classes != nil {
		if err := cfg.Classes(objects); err != nil {
			return fmt.Errorf("register object classes: %w", err)
		}
	}
	t0 := time.Now()
	// Read-only copies of writable layers exist only during a snapshot; a
	// crash can leave one behind.
	if err := rfs.PruneUpperSnapshots(ctx); err != nil {
		logf("prune leftover layer snapshots: %v", err)
	}
	if err := mgr.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	logf("reconciled host state in %s", time.Since(t0).Round(time.Millisecond))
	go mgr.Run(ctx)
	go mgr.RunPools(ctx)
	var usage server.Usage // nil unless sampling (a nil *Sampler would not be nil)
	var sampler *metering.Sampler
	if !cfg.Metrics.NoUsage {
		sampler = metering.New(metering.Config{
			Source: mgr, Reader: usageReader{sel: host.sel, rfs: rfs, bridge: cfg.Bridge}, Store: st,
			Node: cfg.Member.Name, Interval: cfg.Metrics.Interval, Window: cfg.Metrics.History,
			Active: mgr.NoteTraffic, Observe: reg.SampleDone, Logf: logf,
		})
		usage = sampler
		go sampler.Run(ctx)
	}
	go objects.Run(ctx)
	go pruneJournal(ctx, st, cfg.JournalRetention, logf)
	// Lifecycle events: GET /v1/events and the operator's webhooks read
	// the journal through one feed (package events).
	feed := events.NewFeed(st)
	go func() { <-ctx.Done(); feed.Stop() }()
	startWebhooks(ctx, cfg.Webhooks, webhookSecret, cfg.DataDir, feed, logf)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	if err := writeClientConfig(filepath.Join(cfg.DataDir, "client.json"), ClientConfig{URL: url, APIKey: key}); err != nil {
		return err
	}
	plane := control.NewPlane(control.PlaneConfig{Objects: objects, Store: st, Node: nd, Local: mgr, Images: images{s: imgs}, NodeName: cfg.Member.Name, Logf: logf})
	builds, err := imagebuild.New(imagebuild.Options{Images: imgs, Sandboxes: plane, Layers: mgr, Dir: filepath.Join(cfg.DataDir, "builds")})
	if err != nil {
		return fmt.Errorf("image builder: %w", err)
	}
	if cfg.E2BTemplates == "" {
		cfg.E2BTemplates = filepath.Join(cfg.DataDir, "e2b-templates.json")
	}
	templates, err := e2b.LoadTemplates(cfg.E2BTemplates)
	if err != nil {
		return err
	}
	// The E2B-compatible API shares the listener: its routes (/sandboxes,
	// /v2/…, data-plane requests by E2b-Sandbox-Id) never collide with
	// the native /v1 API or the console.
	e2bo := e2b.Options{APIKey: key, Templates: templates, Tenants: tenants(pol), Logf: logf, Forward: router, Node: clusterName(cfg),
		Builds: templateImages{builds, images{s: imgs}}, BuildDir: filepath.Join(cfg.DataDir, "e2b-builds")}
	if sampler != nil {
		e2bo.Metrics = sampler.Metrics
	}
	e2bh := e2b.New(plane, e2bo)
	go e2bh.Run(ctx, time.Second)
	weak := weaken.Off(weaken.HTTPGuard)
	members := membership.NewDirectory(st, st, cfg.Member.Name, cfg.Member.Stale)
	var (
		loop  atomic.Pointer[membership.Loop] // set once the first heartbeat went out
		faces = e2bh.Wrap(metrics.Mount(web.Mount(server.New(plane, server.Options{APIKey: key, Logf: logf, Version: Version, NodeName: cfg.Member.Name, Objects: objects, Journal: st, Tenants: tenants(pol), Nodes: members, Forward: router, Pools: mgr.Pools, Volumes: host.vols, Usage: usage, Builds: builds, Events: feed, Pushes: images{s: imgs}})), reg.Handler(metricsToken)))
		pface = http.Handler(prox)
	)
	if cw != nil {
		since := func() time.Duration {
			if l := loop.Load(); l != nil {
				return l.SinceWritten()
			}
			return 0
		}
		watch := newStaleWatch(cw.self, since, cfg.Member.Stale)
		go watch.run(ctx)
		faces = storeGate(faces, watch)
		pface = storeGate(pface, watch)
	}
	h := server.Guard(faces,
		server.GuardOptions{Logger: requestLogger(cfg.RequestLog), Passthrough: e2b.AppTraffic, Tenant: logTenant(tenants(pol)), Weak: weak, Observe: reg.ObserveRequest})
	srv := server.NewHTTPServer("", h)
	// Cleartext HTTP/2 (h2c) beside HTTP/1.1, for Connect clients.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	fmt.Fprintf(os.Stderr, "berth %s serving on %s\n  API key: %s\n  (also saved to %s)\n  E2B SDKs: E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=<the API key>\n",
		Version, url, shownKey(key, isTerminal(os.Stderr)), filepath.Join(cfg.DataDir, "client.json"), url, url)
	limits := server.ConnLimits{MaxConns: cfg.MaxConns, MaxConnsPerIP: cfg.MaxConnsPerIP, Off: weak, Logf: logf}
	logf("connections: at most %d, %d per client address; fd limit %d", orDefault(cfg.MaxConns, server.DefaultMaxConns), orDefault(cfg.MaxConnsPerIP, server.DefaultMaxConnsPerIP), nofile())
	psrv := preview.NewServer("", pface)
	errc := make(chan error, 3)
	var nsrv *nodeServer
	nodeAddr := ""
	if cfg.Node.Listen != "" {
		// This node for other berth processes (a control plane
		// elsewhere), under the cluster credential; in a cluster also
		// the requests other members forward to this node's sandboxes.
		var recv http.Handler
		if router != nil {
			recv = forward.NewReceiver(forward.ReceiverConfig{Token: token, API: h, Preview: pface})
		}
		nsrv, err = newNodeServer(cfg.Node, nd, token, recv, limits, server.GuardOptions{Logger: requestLogger(cfg.RequestLog), Weak: weak})
		if err != nil {
			return err
		}
		if nodeAddr, err = cfg.Node.advertisedNodeURL(nsrv.url); err != nil {
			return err
		}
		logf("node API serving on %s, advertised as %s (cluster credential in %s)", nsrv.url, nodeAddr, tokPath)
		go func() { errc <- nsrv.serve() }()
	}
	l, err := startMembership(ctx, cfg.Member, nodeAddr, started, st, nd, logf)
	if err != nil {
		return err
	}
	loop.Store(l)
	if cw != nil && cw.isNode {
		go fenceLoop(ctx, mgr, cfg.Member.Beat)
		go cw.drainLoop(ctx, plane.Sleep, cfg.Member.Beat)
	}
	go func() { errc <- srv.Serve(server.LimitListener(ln, limits)) }()
	go func() { errc <- psrv.Serve(server.LimitListener(pln, limits)) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = psrv.Shutdown(sctx)
		if nsrv != nil {
			_ = nsrv.srv.Shutdown(sctx)
		}
		pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
		defer pcancel()
		waitPools(pctx, mgr)
		return nil
	case err := <-errc:
		return err
	}
}

// makeDirs makes the data and run dirs with their modes. The run dir is
// searchable (not listable) by others so that a sandbox's mapped root
// reaches its own mount point under <run>/rootfs; everything else in it is
// 0700 or public (the agent).
func makeDirs(cfg Config) error {
	for d, mode := range map[string]os.FileMode{cfg.DataDir: 0o700, cfg.RunDir: 0o711} {
		if err := os.MkdirAll(d, mode); err != nil {
			return err
		}
		if err := os.Chmod(d, mode); err != nil {
			return err
		}
	}
	return nil
}

// minAPIKey is the shortest API key berth accepts from a file.
const minAPIKey = 32

// clusterDSN fills Cluster from ClusterFile or $BERTH_CLUSTER_DSN when it
// is not given. The DSN is never quoted in an error.
func (c *Config) clusterDSN() error {
	if c.ClusterFile == "" {
		if c.Cluster == "" {
			c.Cluster = os.Getenv(ClusterDSNEnv)
		}
		return nil
	}
	if c.Cluster != "" {
		return errors.New("--cluster and --cluster-file both given: give the DSN once")
	}
	b, err := os.ReadFile(c.ClusterFile)
	if err != nil {
		return fmt.Errorf("--cluster-file: %w", err)
	}
	dsn := strings.TrimSpace(string(b))
	if dsn == "" || strings.ContainsAny(dsn, "\r\n") {
		return fmt.Errorf("--cluster-file %s: want one line holding a PostgreSQL DSN", c.ClusterFile)
	}
	c.Cluster = dsn
	return nil
}

// loadGivenKey reads the key of a file the operator named
// (--api-key-file): a missing file is made as loadOrCreateKey does, an
// existing one is never replaced (it may be a read-only Secret, or shared
// by every member of a cluster), so a short key is an error.
func loadGivenKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return loadOrCreateKey(path)
	}
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if len(key) < minAPIKey {
		return "", fmt.Errorf("--api-key-file %s holds a key of %d characters: berth needs at least %d (an E2B SDK wants e2b_ and 40 hex digits)", path, len(key), minAPIKey)
	}
	return key, nil
}

func loadOrCreateKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= minAPIKey {
		return strings.TrimSpace(string(b)), nil
	}
	// "e2b_" + 40 hex characters: the form E2B's SDKs check, so the same
	// key works as E2B_API_KEY. Keys made earlier ("bk_…") keep working.
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	key := "e2b_" + hex.EncodeToString(b[:])
	if err := writeFileAtomic(path, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	return key, nil
}

func writeClientConfig(path string, c ClientConfig) error {
	b, _ := json.MarshalIndent(c, "", "  ")
	return writeFileAtomic(path, append(b, '\n'), 0o600)
}

// writeFileAtomic writes via a temp file and rename, so a crash never
// leaves a truncated key or config behind.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	// A temp file left by a crash keeps its own mode through O_CREATE;
	// a key must not inherit a looser one.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// hostDNS returns the host's nameservers: the egress resolver runs on
// the host, so loopback resolvers (systemd-resolved) are fine upstreams.
func hostDNS() []string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, a.String())
			}
		}
	}
	return out
}

func self() string {
	p, _ := os.Executable()
	return p
}

// tenants resolves extra API keys through the policy's tenants.
func tenants(p *policy.Policy) func(string) (string, bool) {
	if p == nil {
		return nil
	}
	return func(key string) (string, bool) {
		t, ok := p.TenantForKey(key)
		if !ok {
			return "", false
		}
		return t.Name, true
	}
}

// pruneJournal drops journal entries older than keep, hourly.
func pruneJournal(ctx context.Context, st store.Ops, keep time.Duration, logf func(string, ...any)) {
	if keep <= 0 {
		keep = 30 * 24 * time.Hour
	}
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if n, err := st.PruneJournal(ctx, time.Now().Add(-keep)); err != nil {
			logf("journal: %v", err)
		} else if n > 0 {
			logf("journal: pruned %d entries older than %s", n, keep)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

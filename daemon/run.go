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
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/e2b"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/berth-sh/berth/network"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/preview"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/runtime"
	"github.com/berth-sh/berth/server"
	"github.com/berth-sh/berth/snapshot"
	"github.com/berth-sh/berth/store/sqlite"
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
	if c.RunDir == "" {
		c.RunDir = "/run/berth"
	}
	if c.Subnet == "" {
		c.Subnet = "10.88.0.0/16"
	}
	if c.Bridge == "" {
		c.Bridge = "berth0"
	}
	if c.UpperSize == 0 {
		c.UpperSize = 64 << 30
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
	// The run dir is searchable (not listable) by others so that a
	// sandbox's mapped root reaches its own mount point under
	// <run>/rootfs; everything else in it is 0700 or public (the agent).
	for d, mode := range map[string]os.FileMode{cfg.DataDir: 0o700, cfg.RunDir: 0o711} {
		if err := os.MkdirAll(d, mode); err != nil {
			return err
		}
		if err := os.Chmod(d, mode); err != nil {
			return err
		}
	}
	// Protect the daemon from the OOM killer: a sandbox's hog must die,
	// not the control plane (adversarial checklist #19).
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-900"), 0o644)

	key, err := loadOrCreateKey(filepath.Join(cfg.DataDir, "api-key"))
	if err != nil {
		return err
	}
	// A stable copy of the agent in the host-only run dir: replacing the
	// installed binary never changes what running sandboxes execute.
	agentBin := filepath.Join(cfg.RunDir, "berth-agent")
	if err := copyFile(cfg.AgentBinary, agentBin, 0o555); err != nil {
		return fmt.Errorf("install agent: %w", err)
	}

	st, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "state.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	imgs, err := image.Open(filepath.Join(cfg.DataDir, "images"))
	if err != nil {
		return err
	}
	// Mount points live in the run dir: a sandbox's mapped root must be able
	// to reach its own root (see rootfs.Options.MountDir); the data dir
	// stays 0700.
	rfs, err := rootfs.Open(ctx, cfg.DataDir, rootfs.Options{UpperSize: cfg.UpperSize, MountDir: filepath.Join(cfg.RunDir, "rootfs")})
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	subnet, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil {
		return fmt.Errorf("--subnet %q: %w", cfg.Subnet, err)
	}
	if cfg.Egress.ProxyPort == 0 {
		cfg.Egress.ProxyPort = 3129
	}
	if cfg.Egress.DNSPort == 0 {
		cfg.Egress.DNSPort = 53
	}
	nm, err := network.New(ctx, network.Config{Bridge: cfg.Bridge, Subnet: subnet, NetNSDir: filepath.Join(cfg.RunDir, "netns"), Table: cfg.Bridge,
		ProxyPort: cfg.Egress.ProxyPort, DNSPort: cfg.Egress.DNSPort})
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	defer nm.Close()
	var mgr *controller.Manager
	eg, err := startEgress(ctx, cfg, subnet, func(ctx context.Context, name string) (string, bool, error) {
		return mgr.Secret(ctx, name)
	}, logf)
	if err != nil {
		return err
	}
	defer eg.Close()
	rt := runtime.New(cfg.Runtime, filepath.Join(cfg.RunDir, "runc"))
	isolations := []string{api.IsolationRunc}
	var gv *runtime.OCI
	if cfg.Runsc == "" {
		cfg.Runsc = findBeside(self(), "runsc")
	}
	if cfg.Runsc != "" {
		gv = runtime.New(cfg.Runsc, filepath.Join(cfg.RunDir, "runsc"))
		gv.Flags, gv.StartVia = runtime.GVisorFlags(), runtime.GVisorStartVia()
		// runsc would create its state dir 0711; keep it host-only.
		if err := os.MkdirAll(gv.Root, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(gv.Root, 0o700); err != nil {
			return err
		}
		isolations = append(isolations, api.IsolationGVisor)
		logf("gvisor: %s", cfg.Runsc)
	}

	blobs, blobDesc, err := openBlobs(ctx, cfg)
	if err != nil {
		return err
	}
	// Snapshot layers are unpacked onto the same btrfs filesystem as the
	// writable layers: creating the many small files of a workspace is about
	// twice as fast there as on this host's ext4 root, and restore time is
	// dominated by that. The name holds '@', which no sandbox id can, so
	// rootfs never mistakes it for a sandbox's layer.
	cache, err := snapshot.NewCache(filepath.Join(cfg.DataDir, "uppers", ".layers@cache"))
	if err != nil {
		return fmt.Errorf("snapshot cache: %w", err)
	}
	logf("blob store: %s", blobDesc)

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
	prox := preview.NewProxy(preview.ResolverFunc(func(ctx context.Context, s string, p int, t string) (preview.Exposure, preview.DialFunc, error) {
		return mgr.Lookup(ctx, s, p, t)
	}), pcfg)
	mgr = controller.New(controller.Config{
		Previews: prox,
		PreviewURLs: func(e preview.Exposure) (string, string) {
			return preview.URL(pcfg, e), preview.PathURL(previewBase, e)
		},
		Blobs: blobs, Snapshots: layers{cache},
		Store: st, Images: images{imgs}, Rootfs: rootfsAdapter{rfs}, Network: netAdapter{nm},
		UserNS:           controller.UserNSConfig{Base: cfg.UserNSBase},
		Runtime:          rtAdapter{r: rt, gvisor: gv, runDir: cfg.RunDir, cgroupRoot: "/" + filepath.Base(cfg.RunDir)},
		Isolations:       isolations,
		DefaultIsolation: cfg.DefaultIsolation,
		RunDir:           cfg.RunDir,
		AgentBinary:      agentBin,
		DNS:              []string{network.Gateway(subnet).String()},
		Egress:           eg,
		AlarmTick:        cfg.AlarmTick,
		Logf:             logf,
		Policy:           pol,
	})
	imgs.InUse = mgr.ImageInUse
	objects := durable.NewHost(durable.Config{Store: st, Compute: mgr.Compute(images{imgs}.ListImages), AlarmTick: cfg.AlarmTick, Logf: logf})
	if err := mgr.AttachObjects(objects); err != nil {
		return err
	}
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
	go objects.Run(ctx)
	go pruneJournal(ctx, st, cfg.JournalRetention, logf)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	if err := writeClientConfig(filepath.Join(cfg.DataDir, "client.json"), ClientConfig{URL: url, APIKey: key}); err != nil {
		return err
	}
	backend := struct {
		*controller.Manager
		images
	}{mgr, images{imgs}}
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
	e2bh := e2b.New(mgr, e2b.Options{APIKey: key, Templates: templates, Tenants: tenants(pol), Logf: logf})
	go e2bh.Run(ctx, time.Second)
	srv := server.NewHTTPServer("", e2bh.Wrap(web.Mount(server.New(backend, server.Options{APIKey: key, Logf: logf, Version: Version, Objects: objects, Journal: st, Tenants: tenants(pol)}))))
	// Cleartext HTTP/2 (h2c) beside HTTP/1.1, for Connect clients.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	fmt.Fprintf(os.Stderr, "berth %s serving on %s\n  API key: %s\n  (also saved to %s)\n  E2B SDKs: E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=<the API key>\n",
		Version, url, key, filepath.Join(cfg.DataDir, "client.json"), url, url)
	psrv := preview.NewServer("", prox)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- psrv.Serve(pln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = psrv.Shutdown(sctx)
		return nil
	case err := <-errc:
		return err
	}
}

func loadOrCreateKey(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
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
func pruneJournal(ctx context.Context, st *sqlite.Store, keep time.Duration, logf func(string, ...any)) {
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

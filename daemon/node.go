package daemon

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/network"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/node/local"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/preview"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/runtime"
	"github.com/berth-sh/berth/snapshot"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/store/postgres"
	"github.com/berth-sh/berth/store/sqlite"
	"github.com/berth-sh/berth/volume"
)

// OpenNode builds this machine's node as Run wires it (openNode), without
// the API faces and the preview server, with the built-in Sandbox class on
// an object host of its own (no other classes), reconciles it and runs
// its alarm loops until stop. The node conformance tests drive it
// in-process and through node/remote. cfg is Run's; it must be root.
// stop waits for the loop to end and closes what the node opened;
// sandboxes keep running, as after Run.
func OpenNode(ctx context.Context, cfg Config) (n node.Node, stop func(), err error) {
	if err := cfg.defaults(); err != nil {
		return nil, nil, err
	}
	if err := makeDirs(cfg); err != nil {
		return nil, nil, err
	}
	logf := log.New(os.Stderr, "berth node: ", log.LstdFlags).Printf
	w := nodeWiring{Logf: logf}
	if cfg.PolicyFile != "" {
		if w.Policy, err = policy.Load(cfg.PolicyFile); err != nil {
			return nil, nil, err
		}
	}
	host, err := openNode(ctx, &cfg, w)
	if err != nil {
		return nil, nil, err
	}
	// The node's sandboxes keep their controller objects (the Sandbox
	// class on a host of their own, as Run wires one): wakes, forks and
	// the journal go through them, and their idle alarms fire.
	objects := durable.NewHost(durable.Config{Store: host.store, Compute: host.mgr.Compute(nil), AlarmTick: cfg.AlarmTick, Logf: logf})
	ctrls, err := controller.Attach(objects, controller.Options{})
	if err != nil {
		host.close()
		return nil, nil, err
	}
	host.mgr.AttachControllers(ctrls)
	if err := host.rfs.PruneUpperSnapshots(ctx); err != nil {
		logf("prune leftover layer snapshots: %v", err)
	}
	if err := host.mgr.Reconcile(ctx); err != nil {
		host.close()
		return nil, nil, fmt.Errorf("reconcile: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	var loops sync.WaitGroup
	loops.Add(2)
	go func() {
		defer loops.Done()
		host.mgr.Run(rctx)
	}()
	go func() {
		defer loops.Done()
		objects.Run(rctx)
	}()
	go func() {
		loops.Wait()
		close(done)
	}()
	go host.mgr.RunPools(rctx)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if d := host.mgr.PoolsDone(); d != nil {
				<-d // the idle members are torn down
			}
			host.close()
		})
	}
	return host.mgr.Compute(images{s: host.imgs}.ListImages), stop, nil
}

// localNode is this machine's node as the daemon wires it: the Manager and
// what it drives (store, images, rootfs, network, egress, OCI runtimes,
// blobs, the snapshot layer cache). Run puts the API faces and the durable
// objects around it; OpenNode (tests) uses it alone.
type localNode struct {
	mgr     *local.Manager
	store   stateStore
	imgs    *image.Store
	rfs     *rootfs.Manager
	sel     *runtime.Selector
	vols    *volume.Manager
	closers []func()
}

// close closes what openNode opened, last first. Sandboxes keep running.
func (n *localNode) close() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
	n.closers = nil
}

// nodeWiring is what the node takes from the daemon around it.
type nodeWiring struct {
	// Store is the state store the daemon opened (and closes); nil:
	// openNode opens it from cfg and closes it with the node.
	Store stateStore
	// NodeName is this node's name in a cluster (local.Config.NodeName);
	// "" on a single host.
	NodeName string
	// Previews ends preview tunnels and PreviewURLs names them; both nil:
	// no preview server.
	Previews    *preview.Proxy
	PreviewURLs func(preview.Exposure) (url, pathURL string)
	Policy      *policy.Policy
	Logf        func(format string, args ...any)
	// Meter receives the node's and the egress proxy's measurements
	// (package metrics); nil: none.
	Meter interface {
		local.Meter
		egress.Meter
	}
}

// openNode builds the node from cfg (its defaults applied, its dirs made).
// It fills cfg's Egress ports and Runsc when they are unset.
func openNode(ctx context.Context, cfg *Config, w nodeWiring) (*localNode, error) {
	n := &localNode{}
	ok := false
	defer func() {
		if !ok {
			n.close()
		}
	}()
	// A stable copy of the agent in the host-only run dir: replacing the
	// installed binary never changes what running sandboxes execute.
	agentBin := filepath.Join(cfg.RunDir, "berth-agent")
	if err := copyFile(cfg.AgentBinary, agentBin, 0o555); err != nil {
		return nil, fmt.Errorf("install agent: %w", err)
	}

	st := w.Store
	if st == nil {
		var err error
		if st, err = openStore(ctx, *cfg, w.Logf); err != nil {
			return nil, err
		}
		n.closers = append(n.closers, func() { st.Close() })
	}
	imgs, err := image.Open(filepath.Join(cfg.DataDir, "images"))
	if err != nil {
		return nil, err
	}
	// Mount points live in the run dir: a sandbox's mapped root must be able
	// to reach its own root (see rootfs.Options.MountDir); the data dir
	// stays 0700.
	rfs, err := rootfs.Open(ctx, cfg.DataDir, rootfs.Options{UpperSize: cfg.UpperSize, MountDir: filepath.Join(cfg.RunDir, "rootfs")})
	if err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	n.closers = append(n.closers, func() { rfs.Close() }) // the data dir's lock
	vols, err := volume.Open(ctx, cfg.DataDir, st, volume.Options{ImageSize: cfg.VolumesSize, Node: w.NodeName, Live: liveSandbox(st)})
	if err != nil {
		return nil, err
	}
	subnet, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil {
		return nil, fmt.Errorf("--subnet %q: %w", cfg.Subnet, err)
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
		return nil, fmt.Errorf("network: %w", err)
	}
	n.closers = append(n.closers, func() { nm.Close() })
	eg, err := startEgress(ctx, *cfg, subnet, func(ctx context.Context, name string) (string, bool, error) {
		return n.mgr.Secret(ctx, name)
	}, w.Meter, w.Logf)
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, func() { eg.Close() })
	rt := runtime.New(cfg.Runtime, filepath.Join(cfg.RunDir, "runc"))
	isolations := []string{api.IsolationRunc}
	var gv *runtime.OCI
	if cfg.Runsc == "" {
		cfg.Runsc = findBeside(self(), "runsc")
	}
	if cfg.Runsc != "" {
		if gv, err = runtime.NewGVisor(cfg.Runsc, filepath.Join(cfg.RunDir, "runsc")); err != nil {
			return nil, err
		}
		isolations = append(isolations, api.IsolationGVisor)
		w.Logf("gvisor: %s", cfg.Runsc)
	}

	blobs, blobDesc, err := openBlobs(ctx, *cfg)
	if err != nil {
		return nil, err
	}
	if c, ok := blobs.(interface{ Close() error }); ok { // a local store's lock
		n.closers = append(n.closers, func() { c.Close() })
	}
	// Snapshot layers are unpacked onto the same btrfs filesystem as the
	// writable layers: creating the many small files of a workspace is about
	// twice as fast there as on this host's ext4 root, and restore time is
	// dominated by that. The name holds '@', which no sandbox id can, so
	// rootfs never mistakes it for a sandbox's layer.
	cache, err := snapshot.NewCache(filepath.Join(cfg.DataDir, "uppers", ".layers@cache"))
	if err != nil {
		return nil, fmt.Errorf("snapshot cache: %w", err)
	}
	cache.SetDestroyer(rfs.DestroyLayer)
	w.Logf("blob store: %s", blobDesc)
	if cfg.Blobs.S3Endpoint != "" && !cfg.Blobs.NoImages {
		imgs.SetShared(blobs, blobDesc)
		w.Logf("images: published to and fetched from %s", blobDesc)
	}

	sel := &runtime.Selector{Default: rt, GVisor: gv, MarkerDir: filepath.Join(cfg.RunDir, "gvisor"), CgroupRoot: "/" + filepath.Base(cfg.RunDir)}
	mc := local.Config{
		PreviewURLs: w.PreviewURLs,
		Blobs:       blobs, Snapshots: layers{cache, rfs},
		Store: st, Images: images{s: imgs, logf: w.Logf}, Rootfs: rootfsAdapter{rfs}, Network: netAdapter{nm},
		Volumes:           volumesAdapter{vols},
		UserNS:            local.UserNSConfig{Base: cfg.UserNSBase},
		Runtime:           rtAdapter{sel},
		Isolations:        isolations,
		DefaultIsolation:  cfg.DefaultIsolation,
		DiskMB:            cfg.UpperSize / (1000 * 1000), // the writable layers' btrfs file
		RunDir:            cfg.RunDir,
		AgentBinary:       agentBin,
		DNS:               []string{network.Gateway(subnet).String()},
		Egress:            eg,
		AlarmTick:         cfg.AlarmTick,
		Logf:              w.Logf,
		NodeName:          w.NodeName,
		Gate:              local.GateConfig{Limit: cfg.StartLimit, MaxQueue: cfg.StartQueue, MaxWait: cfg.StartWait},
		PoolMemoryMiB:     cfg.PoolMemoryMiB,
		DefaultSleep:      cfg.SleepMode,
		FreezeMax:         cfg.FreezeMax,
		FreezeMemoryBytes: cfg.FreezeMemoryMiB << 20,
	}
	if err := api.ValidSleepMode(cfg.SleepMode); err != nil {
		return nil, fmt.Errorf("--sleep-mode: %w", err)
	}
	if mc.Pools, err = poolSpecs(*cfg, w.Policy); err != nil {
		return nil, err
	}
	if w.NodeName != "" {
		// A sandbox whose node dies wakes elsewhere from its last sleep,
		// so every sleep persists to the blob store unless asked not to.
		mc.DefaultPersist = api.PersistDisk
		if w.Store != nil {
			mc.MayWake = drainingWake(w.Store, w.NodeName)
		}
	}
	if w.Previews != nil { // a nil *Proxy in the interface would not be nil
		mc.Previews = w.Previews
	}
	if w.Policy != nil { // nor would a nil *policy.Policy
		mc.Policy = w.Policy
	}
	if w.Meter != nil {
		mc.Meter = w.Meter
	}
	mgr := local.New(mc)
	imgs.InUse = mgr.ImageInUse
	n.mgr, n.store, n.imgs, n.rfs, n.sel, n.vols = mgr, st, imgs, rfs, sel, vols
	ok = true
	return n, nil
}

// stateStore is what the daemon needs of its state store; the SQLite and
// the PostgreSQL stores both are one.
type stateStore interface {
	store.Store
	store.Secrets
	store.Cluster
}

// openStore opens the state store: PostgreSQL when cfg.Cluster names one
// (cluster mode), else SQLite in the data dir. The DSN holds a password,
// so it is never logged; the log and errors name the server by host:port.
func openStore(ctx context.Context, cfg Config, logf func(string, ...any)) (stateStore, error) {
	if cfg.Cluster == "" {
		st, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "state.db"))
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return st, nil
	}
	st, err := postgres.Open(ctx, cfg.Cluster)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	logf("state store: PostgreSQL at %s", st.Addr())
	if st.UnverifiedTLS() {
		logf("WARNING: the state store's connection is not verified TLS (sslmode is not verify-full): anyone on the path to %s can read and change berth's state, secrets included", st.Addr())
	}
	return st, nil
}

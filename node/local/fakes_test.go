package local

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agent"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store/sqlite"
)

// The fakes record calls and keep just enough state for the controller's
// logic; the real parts are exercised by their own packages and by the
// integration suite.

type fakeImages struct {
	mu  sync.Mutex
	err error
}

func (f *fakeImages) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeImages) Prepare(ctx context.Context, ref string) (Image, error) {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return Image{}, err
	}
	digest := ref
	if !strings.HasPrefix(ref, "sha256:") {
		digest = "sha256:" + ref
	}
	return Image{Digest: digest, LayerDirs: []string{"/layers/base"}}, nil
}

type fakeRootfs struct {
	mu      sync.Mutex
	mounted map[string]bool
	known   map[string]bool
	removed []string
	idmaps  map[string]IDRange // last map each id was mounted with
}

func (f *fakeRootfs) Mount(ctx context.Context, id string, lowers []string, disk int64, m IDRange) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounted[id], f.known[id] = true, true
	if f.idmaps == nil {
		f.idmaps = map[string]IDRange{}
	}
	f.idmaps[id] = m
	return "/rootfs/" + id, nil
}
func (f *fakeRootfs) Unmount(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mounted, id)
	return nil
}
func (f *fakeRootfs) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mounted, id)
	delete(f.known, id)
	f.removed = append(f.removed, id)
	return nil
}
func (f *fakeRootfs) UpperDir(id string) string                     { return "/uppers/" + id }
func (f *fakeRootfs) Mounted(ctx context.Context) ([]string, error) { return f.keys(f.mounted), nil }
func (f *fakeRootfs) Known(ctx context.Context) ([]string, error)   { return f.keys(f.known), nil }
func (f *fakeRootfs) keys(m map[string]bool) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

type fakeNet struct {
	mu   sync.Mutex
	up   map[string]bool
	fail error
}

func (f *fakeNet) Setup(ctx context.Context, id string, internet bool) (Attachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return Attachment{}, f.fail
	}
	f.up[id] = true
	return Attachment{NetNSPath: "/netns/" + id, IP: netip.MustParseAddr("10.0.0.2")}, nil
}
func (f *fakeNet) Teardown(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.up, id)
	return nil
}
func (f *fakeNet) Cleanup(ctx context.Context, keep map[string]bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.up {
		if !keep[id] {
			delete(f.up, id)
		}
	}
	return nil
}

// fakeRuntime "runs" a container by serving a real in-process agent on
// the socket the controller dials.
type fakeRuntime struct {
	t       *testing.T
	mu      sync.Mutex
	bundles map[string]string
	running map[string]*agent.Server
	creates int
	// written is each container's last Bundle; frozen, resized and
	// hostnames what the pool runtime did (PoolRuntime).
	written   map[string]Bundle
	frozen    map[string]bool
	resized   map[string][3]int64
	hostname  map[string]string
	failStart error         // Start fails with it
	failThaw  error         // Thaw fails with it
	thaws     int           // Thaw calls
	block     chan struct{} // Start waits until it is closed (set before use)
}

func (f *fakeRuntime) Freeze(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen == nil {
		f.frozen = map[string]bool{}
	}
	f.frozen[id] = true
	return nil
}

func (f *fakeRuntime) Thaw(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.thaws++
	if f.failThaw != nil {
		return f.failThaw
	}
	delete(f.frozen, id)
	return nil
}

func (f *fakeRuntime) Resize(ctx context.Context, id string, milliCPU, memoryBytes, pids int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resized == nil {
		f.resized = map[string][3]int64{}
	}
	f.resized[id] = [3]int64{milliCPU, memoryBytes, pids}
	return nil
}

func (f *fakeRuntime) SetHostname(id, bundle, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hostname == nil {
		f.hostname = map[string]string{}
	}
	f.hostname[id] = name
	return nil
}

func (f *fakeRuntime) Create(ctx context.Context, id, bundle string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.bundles[id]; ok {
		return errdefs.AlreadyExists("container %s exists", id)
	}
	f.bundles[id] = bundle
	f.creates++
	return nil
}

func (f *fakeRuntime) Run(ctx context.Context, id, bundle string) error {
	if err := f.Create(ctx, id, bundle); err != nil {
		return err
	}
	return f.Start(ctx, id)
}

func (f *fakeRuntime) Start(ctx context.Context, id string) error {
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failStart != nil {
		return f.failStart
	}
	sock := filepath.Join(filepath.Dir(f.bundles[id]), "agent", "agent.sock")
	b := f.written[id]
	pool := len(b.Args) > 0 && b.Args[len(b.Args)-1] == "--pool-member"
	srv, err := agent.NewServer(agent.Config{DefaultUser: "root", Version: "test", Reaper: agent.NewReaper(false), EtcDir: f.t.TempDir(),
		BaseEnv: b.Env, AwaitIdentity: pool})
	if err != nil {
		return err
	}
	ln, err := agent.Listen(sock)
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	f.running[id] = srv
	return nil
}

func (f *fakeRuntime) Pause(ctx context.Context, id string) error  { return nil }
func (f *fakeRuntime) Resume(ctx context.Context, id string) error { return nil }

func (f *fakeRuntime) Kill(ctx context.Context, id string, sig syscall.Signal) error { return nil }

func (f *fakeRuntime) Delete(ctx context.Context, id string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if srv := f.running[id]; srv != nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		srv.Shutdown(sctx)
		cancel()
	}
	delete(f.running, id)
	delete(f.bundles, id)
	delete(f.frozen, id)
	return nil
}

func (f *fakeRuntime) State(ctx context.Context, id string) (Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.bundles[id]; !ok {
		return Container{}, errdefs.NotFound("container %s not found", id)
	}
	st := "created"
	if f.running[id] != nil {
		st = "running"
	}
	if f.frozen[id] {
		st = "paused"
	}
	return Container{ID: id, Status: st}, nil
}

func (f *fakeRuntime) List(ctx context.Context) ([]Container, error) {
	f.mu.Lock()
	ids := make([]string, 0, len(f.bundles))
	for id := range f.bundles {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	var out []Container
	for _, id := range ids {
		c, _ := f.State(ctx, id)
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeRuntime) OOMKilled(id string) bool                            { return false }
func (f *fakeRuntime) CleanupCgroups(keep map[string]bool) error           { return nil }
func (f *fakeRuntime) ReleaseBundle(dir string) error                      { return nil }
func (f *fakeRuntime) Verify(ctx context.Context, id, bundle string) error { return nil }
func (f *fakeRuntime) InitPid(id, bundle string) (int, error) {
	return 0, errdefs.NotFound("no init process in the fake")
}

func (f *fakeRuntime) WriteBundle(dir string, b Bundle) error {
	f.mu.Lock()
	if f.written == nil {
		f.written = map[string]Bundle{}
	}
	f.written[b.ID] = b
	f.mu.Unlock()
	return os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o600)
}

type rig struct {
	m   *Manager
	img *fakeImages
	rfs *fakeRootfs
	net *fakeNet
	rt  *fakeRuntime
	cfg Config
	h   *durable.Host // the object host the controller is attached to
	// at, when set, is the clock of the host and of the Sandbox class's
	// idle decisions (the compute's activity times stay real).
	at time.Time
}

func (r *rig) now() time.Time {
	if !r.at.IsZero() {
		return r.at
	}
	return time.Now()
}

// fireAt delivers the controller objects' alarms due at t.
func (r *rig) fireAt(t time.Time) {
	r.at = t
	r.h.FireDue(context.Background())
	r.at = time.Time{}
}

func newRig(t *testing.T) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		// Starts chown the agent's socket dir to the sandbox's root and
		// set securebits on the rootfs, as the daemon does.
		t.Skip("needs root: a start chowns to the sandbox's host ids and sets securebits")
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newRigOn(t, st, "")
}

// newRigOn is a rig on a given store; node names it as a cluster node
// (Config.NodeName), "" for a single host. Rigs on one store are the nodes
// of one cluster, each with its own runtime, rootfs and network fakes.
func newRigOn(t *testing.T, st *sqlite.Store, node string) *rig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a start chowns to the sandbox's host ids and sets securebits")
	}
	runDir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{
		img: &fakeImages{},
		rfs: &fakeRootfs{mounted: map[string]bool{}, known: map[string]bool{}},
		net: &fakeNet{up: map[string]bool{}},
		rt:  &fakeRuntime{t: t, bundles: map[string]string{}, running: map[string]*agent.Server{}},
	}
	r.cfg = Config{Store: st, Images: r.img, Rootfs: r.rfs, Network: r.net, Runtime: r.rt,
		RunDir: runDir, AgentBinary: "/bin/true", Logf: t.Logf, StartTimeout: 5 * time.Second, NodeName: node}
	r.m = New(r.cfg)
	// As the daemon runs it: the controller on package durable.
	r.h = durable.NewHost(durable.Config{Store: st, Compute: r.m.Compute(nil), Logf: t.Logf, Now: r.now})
	attachControllers(t, r.m, r.h, r.now)
	t.Cleanup(func() {
		for id := range r.rt.running {
			r.rt.Delete(context.Background(), id, true)
		}
		os.RemoveAll(runDir)
	})
	return r
}

// plane is the control plane over m, as the daemon wires it: the API's
// lifecycle, exec and files calls are the plane's, which reaches m
// through its objects and its node.Node.
func plane(m *Manager) *control.Plane {
	var h *durable.Host
	if o, ok := m.objects.(*controller.Objects); ok {
		h = o.Host()
	}
	return control.NewPlane(control.PlaneConfig{Objects: h, Store: m.st, Node: m.Compute(nil), Local: m, Logf: m.cfg.Logf})
}

// attachControllers registers the built-in Sandbox class on h and hands
// its objects to m, as the daemon does; now is the class's clock of idle
// decisions (nil: time.Now).
func attachControllers(t *testing.T, m *Manager, h *durable.Host, now func() time.Time) {
	t.Helper()
	c, err := controller.Attach(h, controller.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	m.AttachControllers(c)
}

// newAttached is a new Manager on cfg (a restarted daemon's) with its
// own object host, as the daemon wires them.
func newAttached(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m := New(cfg)
	h := durable.NewHost(durable.Config{Store: cfg.Store.(*sqlite.Store), Compute: m.Compute(nil), AlarmTick: cfg.AlarmTick, Logf: cfg.Logf})
	attachControllers(t, m, h, nil)
	return m
}

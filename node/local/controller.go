package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/exposure"
	"github.com/berth-sh/berth/internal/tenant"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/store"
)

// Config wires a Manager.
type Config struct {
	Store   store.Store
	Images  Images
	Rootfs  Rootfs
	Network Network
	Runtime Runtime
	// Volumes mounts named volumes (nil: a create that asks for volumes
	// is refused).
	Volumes Volumes
	// Blobs and Snapshots enable snapshots, fork, persist=disk and
	// backups; without them those calls fail with a clear error.
	Blobs     blob.Store
	Snapshots Snapshotter
	// RunDir is a host-only directory (0700) for bundles and agent sockets.
	RunDir string
	// AgentBinary is the berth-agent executable bind-mounted into sandboxes.
	AgentBinary string
	// DefaultImage is used when a create request names no image.
	DefaultImage string
	// DNS servers written to each sandbox's resolv.conf when it has internet
	// (with Egress: always, since they are berth's resolver).
	DNS []string
	// Egress, when set, enforces network policies through the egress
	// proxy; without it only the internet flag applies.
	Egress Egress
	// AlarmTick is how often idle sandboxes are checked; default 1s.
	AlarmTick time.Duration
	// StartTimeout bounds one container start (agent ready); default 30s.
	// It starts once the image is ready.
	StartTimeout time.Duration
	// ImageTimeout bounds making a start's image ready: in a cluster that
	// may mean fetching and unpacking hundreds of MB from the shared blob
	// store, which takes longer than a start. Default 30 min.
	ImageTimeout time.Duration
	Logf         func(format string, args ...any)
	// Previews ends open preview connections (preview.Proxy); PreviewURLs
	// renders an exposure's URLs (preview.URL, preview.PathURL). Both
	// optional.
	Previews interface {
		Revoke(sandbox string, port int)
	}
	PreviewURLs func(exposure.Exposure) (url, pathURL string)
	// UserNS is where sandboxes' host uid/gid ranges come from.
	UserNS UserNSConfig
	// DefaultIsolation applies when a create request names none (default
	// api.IsolationRunc); Isolations lists what this host offers (default:
	// runc only).
	DefaultIsolation string
	Isolations       []string
	// DiskMB is the size of the filesystem that holds the writable
	// layers, reported as the node's disk capacity (Info); 0: unknown.
	DiskMB int64
	// Policy is the operator policy every start must pass (admission.go);
	// nil: only berth's built-in limits.
	Policy Policy
	// NodeName is this node's name in a cluster: it sees, runs and writes
	// only the sandboxes whose record it owns (owner.go). Empty on a
	// single host, where every record is this node's.
	NodeName string
	// DefaultPersist applies when a create names no persist: "" or
	// api.PersistNone on a single host; a cluster makes it api.PersistDisk,
	// so a sandbox whose node dies wakes elsewhere with its files as of
	// its last sleep.
	DefaultPersist string
	// MayWake, when set, is asked before a sleeping sandbox starts again
	// (ctx is the request's that woke it); an error refuses the start and
	// is the request's answer, with nothing changed. A draining cluster
	// node uses it to leave a sandbox asleep for the entry node to move
	// (daemon, berth node drain).
	MayWake func(ctx context.Context, rec store.Sandbox) error
	// Pools are the warm pools this node keeps (pool.go; RunPools fills
	// them); PoolBackoff is the first retry delay after a failed refill
	// (default 1 s, doubling to a minute).
	Pools       []PoolSpec
	PoolBackoff time.Duration
	// PoolMemoryMiB bounds the memory all pools' members may hold
	// (pool_size.go), each counted at PoolMemberMiB (default
	// DefaultPoolMemberMiB); 0: no budget.
	PoolMemoryMiB, PoolMemberMiB int64
	// Gate bounds how many starts run at once and how many wait (gate.go).
	Gate GateConfig
	// Sleep tiers (sleep.go). DefaultSleep applies when a create names no
	// sleep mode ("" = api.SleepStop). FreezeMax is how long a sandbox
	// stays frozen before it escalates (0: no limit); FreezeMemoryBytes
	// bounds the memory all frozen sandboxes hold (0: no budget), the
	// oldest frozen escalating first. Checkpointer is the checkpoint tier;
	// nil: this node cannot checkpoint.
	DefaultSleep      string
	FreezeMax         time.Duration
	FreezeMemoryBytes int64
	Checkpointer      Checkpointer
	// Meter receives start durations, agent deaths and reconcile
	// repairs (meter.go); nil: none.
	Meter Meter
}

// Manager is the set of sandbox controllers on this daemon.
type Manager struct {
	cfg Config
	st  store.Store

	mu     sync.Mutex
	actors map[string]*actor // by name; guarded by mu

	idMu sync.Mutex // serializes user namespace range allocation
	// objects, once attached (class.go), are the sandboxes' controller
	// objects (package controller).
	objects Controllers

	// held is what this node holds, for Info.
	held holdings

	admitMu  sync.Mutex
	reserved map[string]*store.Sandbox // admitted starts in flight; guarded by admitMu

	gate  *startGate // bounds concurrent starts (gate.go)
	pools *pools     // warm pools (pool.go); nil without any
}

// actor is the in-memory half of one sandbox's controller. Every lifecycle
// operation holds mu for its whole duration, so operations on one name are
// serialized while different names proceed in parallel.
type actor struct {
	name string
	mu   sync.Mutex
	// The fields below are guarded by mu.
	rec     store.Sandbox
	exists  bool // rec is persisted
	deleted bool // the actor was removed from the map; callers must retry
	agent   *agentclient.Client
	// entrypoint: this run has a node.StartOptions.Entrypoint process
	// (its exit code, once it ended, is rec.ExitCode).
	entrypoint bool
	// forkSnap is the last snapshot Fork took of this sandbox, which a
	// later fork reuses while the upper is unchanged (reusableForkSnapshot).
	forkSnap forkSnap
	// rootfs is where this run's root is mounted on the host ("" until a
	// start mounts it, and after a daemon restart): volumes detach there.
	rootfs string

	// activity is guarded by actMu, not mu, so exec does not wait for a
	// slow lifecycle op just to record that it ran.
	actMu      sync.Mutex
	active     int       // running execs and open streams
	lastActive time.Time // last API activity
	savedSleep time.Time // SleepAt last persisted
}

// ValidName reports whether s can name a sandbox. Names become host names
// and parts of preview URLs, so they are DNS labels.
func ValidName(s string) error { return api.ValidateSandboxName(s) }

// New returns a Manager. Attach its controllers (AttachControllers), then
// call Reconcile before serving requests and Run to start the alarm loop.
func New(cfg Config) *Manager {
	if cfg.AlarmTick == 0 {
		cfg.AlarmTick = time.Second
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.ImageTimeout == 0 {
		cfg.ImageTimeout = 30 * time.Minute
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = DefaultImageName
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.Meter == nil {
		cfg.Meter = nopMeter{}
	}
	cfg.UserNS.defaults()
	m := &Manager{cfg: cfg, st: cfg.Store, actors: map[string]*actor{}}
	m.gate = newStartGate(cfg.Gate, goruntime.NumCPU())
	if len(cfg.Pools) > 0 {
		m.pools = newPools(m, cfg.Pools)
	}
	return m
}

// lock returns the actor for name with its mutex held, loading its record
// from the store on first use. A caller with a tenant (tenant.From)
// reaches only its own tenant's sandboxes.
func (m *Manager) lock(ctx context.Context, name string) (*actor, error) {
	a, err := m.lockAny(ctx, name)
	if err != nil {
		return nil, err
	}
	if t := tenant.From(ctx); t != "" && a.exists && a.rec.Tenant != t {
		a.mu.Unlock()
		return nil, errdefs.PermissionDenied("sandbox %q belongs to another tenant", name)
	}
	return a, nil
}

func (m *Manager) lockAny(ctx context.Context, name string) (*actor, error) {
	for {
		m.mu.Lock()
		a := m.actors[name]
		if a == nil {
			a = &actor{name: name}
			m.actors[name] = a
			a.mu.Lock()
			m.mu.Unlock()
			rec, err := m.st.Get(ctx, name)
			if err == nil && m.cfg.NodeName != "" && rec.Owner == "" {
				rec, err = m.claimUnowned(ctx, rec)
			}
			if err == nil && !m.mine(rec) {
				err = notMine(rec)
			}
			switch {
			case err == nil:
				a.rec, a.exists = rec, true
				a.lastActive = rec.LastActive
			case !errdefs.IsKind(err, errdefs.ErrNotFound):
				m.mu.Lock()
				delete(m.actors, name)
				m.mu.Unlock()
				a.deleted = true
				a.mu.Unlock()
				return nil, err
			}
			return a, nil
		}
		m.mu.Unlock()
		a.mu.Lock()
		if a.deleted {
			a.mu.Unlock()
			continue
		}
		return a, nil
	}
}

// drop removes an actor whose record no longer exists. Callers hold a.mu.
func (m *Manager) drop(a *actor) {
	m.mu.Lock()
	if m.actors[a.name] == a {
		delete(m.actors, a.name)
	}
	m.mu.Unlock()
	a.deleted = true
}

// save persists a's record, keeping the optimistic version in step.
func (m *Manager) save(ctx context.Context, a *actor) error {
	a.actMu.Lock()
	a.rec.LastActive = a.lastActive
	a.rec.SleepAt = time.Time{}
	if a.rec.State == api.StateRunning && !a.rec.KeepAlive {
		a.rec.SleepAt = a.lastActive.Add(a.rec.SleepAfter)
		if a.active > 0 {
			// Busy: the alarm can only fire SleepAfter after it ends.
			a.rec.SleepAt = time.Now().UTC().Add(a.rec.SleepAfter)
		}
	}
	a.savedSleep = a.rec.SleepAt
	a.actMu.Unlock()
	if !a.exists && m.cfg.NodeName != "" && a.rec.Owner == "" {
		a.rec.Owner, a.rec.OwnerEpoch = m.cfg.NodeName, 1
	}
	if err := m.checkWrite(a.rec); err != nil {
		return err
	}
	v, err := m.st.Put(ctx, a.rec)
	if err != nil {
		return fmt.Errorf("persist sandbox %q: %w", a.name, err)
	}
	a.rec.Version = v
	a.exists = true
	return nil
}

func (m *Manager) journal(ctx context.Context, name, op, detail string) {
	if m.objects != nil {
		// Through the controller object's journal (package durable):
		// same table and stream, with status and timestamps.
		if err := m.objects.Journal(context.WithoutCancel(ctx), name, op, detail); err != nil {
			m.cfg.Logf("journal %s %s: %v", name, op, err)
		}
		return
	}
	if err := m.st.Append(ctx, store.JournalEntry{Sandbox: name, Op: op, Detail: detail}); err != nil {
		m.cfg.Logf("journal %s %s: %v", name, op, err)
	}
}

func newID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "s" + hex.EncodeToString(b[:])
}

// ends here). It never wakes the sandbox.
func (m *Manager) describe(ctx context.Context, name string) (api.Sandbox, error) {
	if err := ValidName(name); err != nil {
		return api.Sandbox{}, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return api.Sandbox{}, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	return m.view(a), nil
}

// destroy is Destroy's body.
func (m *Manager) destroy(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return errdefs.NotFound("sandbox %q not found", name)
	}
	// Destruction must finish even if the caller goes away mid-way.
	ctx = context.WithoutCancel(ctx)
	if err := m.stopCompute(ctx, a); err != nil {
		return err
	}
	if err := m.cfg.Rootfs.Remove(ctx, a.rec.ID); err != nil {
		return fmt.Errorf("destroy %q: remove writable layer: %w", name, err)
	}
	if err := m.deleteOwned(ctx, name); err != nil {
		return err
	}
	if m.cfg.Egress != nil {
		m.cfg.Egress.Forget(name)
	}
	if p := a.rec.PersistSnapshot; p != "" {
		if users, err := m.snapshotUsers(ctx, p); err == nil && len(users) == 0 {
			_ = m.forgetSnapshot(ctx, p)
		}
	}
	m.journal(ctx, name, "destroy", a.rec.ID)
	m.drop(a)
	return nil
}

// stopSandbox is the compute's Stop: it sleeps the sandbox, keeping its
// files, and reports whether it did. With o.IdleSince it leaves a sandbox
// that had activity after that time, or has an operation in flight.
func (m *Manager) stopSandbox(ctx context.Context, name string, o node.StopOptions) (bool, error) {
	if err := ValidName(name); err != nil {
		return false, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return false, err
	}
	defer a.mu.Unlock()
	if !a.exists {
		m.drop(a)
		return false, errdefs.NotFound("sandbox %q not found", name)
	}
	if a.rec.State == api.StateSleeping {
		return false, nil
	}
	if !o.IdleSince.IsZero() {
		a.actMu.Lock()
		busy := a.active > 0 || a.lastActive.After(o.IdleSince)
		a.actMu.Unlock()
		if busy || a.rec.State != api.StateRunning {
			return false, nil
		}
	}
	reason := o.Reason
	if reason == "" {
		reason = "requested"
	}
	if err := m.sleep(context.WithoutCancel(ctx), a, reason); err != nil {
		return false, err
	}
	return true, nil
}

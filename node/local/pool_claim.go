package local

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/store"
)

var errNoPoolRuntime = errdefs.FailedPrecondition("the runtime cannot freeze, resize or rename a running container")

// startFresh starts a: the first start of a just-created sandbox (fresh)
// from a warm pool member when one matches, every other start cold
// (start). Callers hold a.mu.
func (m *Manager) startFresh(ctx context.Context, a *actor, fresh bool) error {
	if fresh && m.pools != nil {
		claimed, err := m.claim(ctx, a)
		if claimed || err != nil {
			return err
		}
	}
	return m.start(ctx, a)
}

// takeFor takes a member of a pool that serves a fresh start of rec: same
// image digest and isolation, the pool's instance type if it names one,
// the same snapshot (or none on both sides), and a raw internet switch
// the member has or the network can change. nil if none; the refill loop
// is woken either way.
func (ps *pools) takeFor(ctx context.Context, m *Manager, rec *store.Sandbox) *member {
	if isolationOf(*rec) != api.IsolationRunc || rec.PersistSnapshot != "" || len(rec.Volumes) > 0 {
		return nil
	}
	if _, ok := m.cfg.Runtime.(PoolRuntime); !ok {
		return nil
	}
	img, err := m.prepare(ctx, rec.Image)
	if err != nil {
		return nil // the cold start reports it
	}
	if rec.Start != nil {
		if _, err := startProcessRequest(*rec.Start, img); err != nil {
			return nil // likewise
		}
	}
	internet := m.rawInternet(policyOf(*rec))
	_, canSwitch := m.cfg.Network.(interface {
		SetInternet(ctx context.Context, id string, on bool) error
	})
	mb := ps.take(func(s PoolSpec, digest string) bool {
		return s.Isolation == isolationOf(*rec) && (s.Instance == "" || s.Instance == rec.Instance) &&
			(digest == "" || digest == img.Digest) && s.Snapshot == rec.Snapshot
	}, func(mb *member) bool {
		return mb.digest == img.Digest && (mb.internet == internet || canSwitch) &&
			mb.snapshot == rec.Snapshot && sameChain(mb.chain, rec.Chain)
	})
	ps.wake() // refill behind the claim
	return mb
}

func sameChain(a, b []store.Layer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].SHA256 != b[i].SHA256 {
			return false
		}
	}
	return true
}

// reserveWarm holds mb for name's start (admit); returnWarm gives it back
// to its pool if the start did not bind it (the policy refused, say):
// untouched and still frozen, it was never anyone's.
func (m *Manager) reserveWarm(name string, mb *member) {
	ps := m.pools
	ps.mu.Lock()
	ps.reserved[name] = mb
	ps.mu.Unlock()
}

func (m *Manager) returnWarm(name string) {
	ps := m.pools
	ps.mu.Lock()
	defer ps.mu.Unlock()
	mb := ps.reserved[name]
	if mb == nil {
		return
	}
	delete(ps.reserved, name)
	mb.pool.claims--
	mb.pool.idle = append([]*member{mb}, mb.pool.idle...)
}

// takeWarm hands the member reserved for name to its claim.
func (m *Manager) takeWarm(name string) *member {
	ps := m.pools
	ps.mu.Lock()
	defer ps.mu.Unlock()
	mb := ps.reserved[name]
	delete(ps.reserved, name)
	return mb
}

// claim binds the sandbox's identity to the warm pool member its admit
// reserved, if any: a's fresh record takes the member's id and host id
// range, then the member thaws and gets the sandbox's limits (cgroup and
// disk), raw internet switch, egress policy and secret injection (host
// side), /etc/hosts, /etc/hostname and resolv.conf, the hostname of its
// UTS namespace, and the environment of its later execs (the agent's
// one-time identity bind); its posture is verified again, and it runs. A
// member that fails any step is destroyed and the sandbox starts cold
// instead: claim reports false then, with no error. Callers hold a.mu.
func (m *Manager) claim(ctx context.Context, a *actor) (bool, error) {
	mb := m.takeWarm(a.name)
	if mb == nil {
		return false, nil
	}
	rec := &a.rec
	pr := m.cfg.Runtime.(PoolRuntime) // takeFor checked
	t0 := time.Now()
	base := context.WithoutCancel(ctx)
	ctx, cancel := context.WithTimeout(base, m.cfg.StartTimeout)
	defer cancel()
	// The create saved its record with the member's id and id range
	// already (bindReserved); a cold start after a failed claim gets an
	// id of its own.
	persisted := a.exists && rec.ID == mb.id
	coldID := rec.ID
	if coldID == mb.id {
		coldID = newID()
	}
	rec.ID, rec.HostUID, rec.ImageDigest = mb.id, mb.userns.HostID, mb.digest
	if err := m.bind(ctx, a, pr, mb, persisted); err != nil {
		m.cfg.Logf("sandbox %s: warm pool member %s: %v; starting cold", a.name, mb.id, err)
		a.agent = nil
		if m.cfg.Egress != nil {
			m.cfg.Egress.Detach(a.name)
		}
		m.discardMember(base, mb)
		rec.ID, rec.HostUID, rec.ImageDigest = coldID, 0, ""
		rec.State = api.StateStarting
		if serr := m.save(base, a); serr != nil {
			return true, serr
		}
		return false, nil
	}
	m.journal(ctx, a.name, "start", fmt.Sprintf("%s in %s (warm pool)", rec.ID, time.Since(t0).Round(time.Millisecond)))
	if rec.Start != nil {
		// takeFor checked that the command can be made from the image.
		if img, err := m.prepare(ctx, rec.ImageDigest); err == nil {
			if req, err := startProcessRequest(*rec.Start, img); err == nil {
				m.runStartCommand(ctx, a, req)
			}
		}
	}
	m.cfg.Meter.StartDone("pool", time.Since(t0))
	go m.watchInit(a.name, rec.ID, filepath.Join(m.sandboxDir(rec.ID), "bundle"), rec.RunID)
	return true, nil
}

// bindReserved gives a fresh record the id, host id range and image
// digest of the warm pool member its admit reserved, if any, so that the
// create's first save already holds them (claim then saves only when the
// sandbox runs). Callers hold a.mu.
func (m *Manager) bindReserved(a *actor) {
	ps := m.pools
	if ps == nil {
		return
	}
	ps.mu.Lock()
	mb := ps.reserved[a.name]
	ps.mu.Unlock()
	if mb != nil {
		a.rec.ID, a.rec.HostUID, a.rec.ImageDigest = mb.id, mb.userns.HostID, mb.digest
	}
}

// bind is claim's late binding; see claim. persisted: the record is saved
// with the member's id and id range already.
func (m *Manager) bind(ctx context.Context, a *actor, pr PoolRuntime, mb *member, persisted bool) error {
	rec := &a.rec
	pol := policyOf(*rec)
	internet := m.rawInternet(pol)
	// The record holds the member's id and id range before anything of
	// it changes: a crash from here on leaves a starting record that
	// Reconcile cleans like any interrupted start.
	if !persisted {
		if err := m.save(ctx, a); err != nil {
			return err
		}
	}
	if mb.userns.HostID != 0 {
		m.pools.releaseUID(mb.userns.HostID)
	}
	failpoint.Hit("pool.claim-persisted")
	if err := pr.Thaw(ctx, mb.id); err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	// The agent may close a connection it held idle through the freeze
	// as soon as it runs again: talk to it on a fresh one.
	mb.agent.Close()
	// The agent's one-time identity bind (the environment of later
	// execs) runs while the host-side steps below do: it needs only the
	// thawed agent, and nothing of the sandbox is handed out before all
	// of them are done. Every return below waits for it.
	var extraEnv map[string]string
	if m.cfg.Egress != nil {
		extraEnv = egress.SandboxEnv()
	}
	a.agent = mb.agent
	env := sandboxEnv(mb.imgEnv, extraEnv, rec.Env, a.name)
	idDone := make(chan error, 1)
	go func() { idDone <- mb.agent.BindIdentity(ctx, env) }()
	if err := m.bindHost(ctx, a, pr, mb, internet, pol); err != nil {
		<-idDone
		return err
	}
	if err := <-idDone; err != nil {
		return fmt.Errorf("bind the agent's identity: %w", err)
	}
	// The member's posture was verified at its start; check it again on
	// the process that now serves this sandbox.
	if err := m.cfg.Runtime.Verify(ctx, mb.id, filepath.Join(m.sandboxDir(mb.id), "bundle")); err != nil {
		return err
	}
	now := time.Now().UTC()
	rec.State, rec.StartedAt, rec.OOMKilled = api.StateRunning, now, false
	rec.RunID = newArtifactID("run_")
	rec.IP = mb.att.IP.String()
	m.touch(a)
	if err := m.save(ctx, a); err != nil {
		rec.State = api.StateStarting
		return err
	}
	return nil
}

// bindHost is bind's host-side steps: limits, disk, raw internet, egress,
// /etc files and the hostname.
func (m *Manager) bindHost(ctx context.Context, a *actor, pr PoolRuntime, mb *member, internet bool, pol api.NetworkPolicy) error {
	rec := &a.rec
	dir := m.sandboxDir(mb.id)
	bundle := filepath.Join(dir, "bundle")
	r := rec.Resources
	if err := pr.Resize(ctx, mb.id, int64(r.VCPU*1000), r.MemoryMiB<<20, pidsLimit(r)); err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	if r.DiskMB != mb.res.DiskMB {
		// Mounting a mounted id with the same lowers only sets its limit.
		if _, err := m.cfg.Rootfs.Mount(ctx, mb.id, mb.lowers, r.DiskMB*1000*1000, mb.userns); err != nil {
			return fmt.Errorf("disk limit: %w", err)
		}
	}
	if internet != mb.internet {
		n, ok := m.cfg.Network.(interface {
			SetInternet(ctx context.Context, id string, on bool) error
		})
		if !ok {
			return errdefs.FailedPrecondition("the network cannot switch a namespace's internet")
		}
		if err := n.SetInternet(ctx, mb.id, internet); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	if m.cfg.Egress != nil {
		if err := m.cfg.Egress.Attach(a.name, mb.att.IP, pol); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
	}
	if err := m.writeEtc(filepath.Join(dir, "etc"), a.name, mb.att, rec.Internet || m.cfg.Egress != nil); err != nil {
		return err
	}
	if err := pr.SetHostname(mb.id, bundle, a.name); err != nil {
		return err
	}
	return nil
}

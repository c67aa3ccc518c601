package local

import (
	"context"
	"errors"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/tenant"
	"github.com/berth-sh/berth/store"
)

// startFlags are the compute's choices beyond an api.CreateSandboxRequest.
type startFlags struct {
	createOnly bool // an existing sandbox is "already exists"
	notRunning bool // a running sandbox is failed precondition (durable's Start)
	update     bool // apply to an existing sandbox without starting it (durable's Update)
	selfSleep  bool // store.Sandbox.SelfSleep
}

// startSandbox creates the sandbox or wakes it, with req's choices: the
// compute's Start (compute.go). Its controller, the Sandbox class, makes
// the decisions; this is the machinery.
func (m *Manager) startSandbox(ctx context.Context, req api.CreateSandboxRequest, f startFlags) (api.Sandbox, bool, error) {
	if err := ValidName(req.Name); err != nil {
		return api.Sandbox{}, false, err
	}
	sleepAfter := 10 * time.Minute
	if req.SleepAfter != "" {
		d, err := time.ParseDuration(req.SleepAfter)
		if err != nil || d < time.Second || d > 30*24*time.Hour {
			return api.Sandbox{}, false, errdefs.InvalidArgument("sleepAfter %q must be a duration between 1s and 720h, like \"30s\" or \"10m\"", req.SleepAfter)
		}
		sleepAfter = d
	}
	for k := range req.Env {
		if k == "" || len(k) > 256 || containsAny(k, "=\x00") {
			return api.Sandbox{}, false, errdefs.InvalidArgument("invalid env name %q", k)
		}
	}
	if req.Network != nil {
		if _, err := egress.Compile(*req.Network); err != nil {
			return api.Sandbox{}, false, err
		}
	}
	a, err := m.lock(ctx, req.Name)
	if err != nil {
		return api.Sandbox{}, false, err
	}
	defer a.mu.Unlock()
	created := false
	if !a.exists && f.update {
		m.drop(a)
		return api.Sandbox{}, false, errdefs.NotFound("sandbox %q not found", req.Name)
	}
	if a.exists {
		if f.createOnly {
			return api.Sandbox{}, false, errdefs.AlreadyExists("sandbox %q already exists", req.Name)
		}
		if f.notRunning && a.rec.State == api.StateRunning {
			return api.Sandbox{}, false, errdefs.FailedPrecondition("container %q is already running", req.Name)
		}
		if req.Isolation != "" && req.Isolation != isolationOf(a.rec) {
			return api.Sandbox{}, false, errdefs.FailedPrecondition("sandbox %q runs with isolation %q; destroy it to change to %q", req.Name, isolationOf(a.rec), req.Isolation)
		}
		// Instance and internet are chosen at each start: a request that
		// names them applies to the next start (now, if it sleeps).
		if err := applyStartOptions(&a.rec, req); err != nil {
			return api.Sandbox{}, false, err
		}
		if req.Network != nil {
			if err := m.setNetworkLocked(ctx, a, *req.Network); err != nil {
				return api.Sandbox{}, false, err
			}
		}
		if req.SleepAfter != "" {
			a.rec.SleepAfter = sleepAfter
		}
		a.rec.SelfSleep = f.selfSleep
		if f.update {
			m.touch(a) // a request to the sandbox, as a get-or-create always was
			return m.view(a), false, m.save(ctx, a)
		}
		if a.rec.State != api.StateRunning {
			release, err := m.admit(ctx, &a.rec)
			if err != nil {
				return api.Sandbox{}, false, err
			}
			defer release()
		}
	} else {
		instance, res, err := resolveInstance(req.Instance, req.Resources)
		if err != nil {
			return api.Sandbox{}, false, err
		}
		img := req.Image
		if img == "" {
			img = m.cfg.DefaultImage
		}
		now := time.Now().UTC()
		a.rec = store.Sandbox{
			Name: req.Name, ID: newID(), State: api.StateStarting, Image: img,
			Instance: instance, Resources: res, Internet: req.Internet != nil && *req.Internet,
			Env: req.Env, Labels: req.Labels, SleepAfter: sleepAfter,
			KeepAlive: req.KeepAlive != nil && *req.KeepAlive, CreatedAt: now, LastActive: now,
			Tenant: tenant.From(ctx), SelfSleep: f.selfSleep,
		}
		iso, err := m.isolation(req.Isolation)
		if err != nil {
			return api.Sandbox{}, false, err
		}
		a.rec.Isolation = iso
		if req.Network != nil {
			p := *req.Network
			p.Allow, p.Deny, p.Inject = nonNil(p.Allow), nonNil(p.Deny), nonNil(p.Inject)
			a.rec.Network, a.rec.Internet = &p, p.Internet
		}
		persist := req.Persist
		if persist == "" {
			persist = m.cfg.DefaultPersist
		}
		switch persist {
		case "", api.PersistNone:
			a.rec.Persist = api.PersistNone
		case api.PersistDisk:
			a.rec.Persist = api.PersistDisk
		case api.PersistInterval:
			a.rec.Persist = api.PersistInterval
		default:
			m.drop(a)
			return api.Sandbox{}, false, errdefs.InvalidArgument("persist must be %q, %q or %q, got %q", api.PersistNone, api.PersistDisk, api.PersistInterval, req.Persist)
		}
		every, err := api.ParsePersistEvery(a.rec.Persist, req.PersistEvery)
		if err != nil {
			m.drop(a)
			return api.Sandbox{}, false, err
		}
		a.rec.PersistEvery = every
		if a.rec.Sleep, err = m.sleepMode(req.Sleep, a.rec.Isolation); err != nil {
			m.drop(a)
			return api.Sandbox{}, false, err
		}
		if err := m.volumesFor(&a.rec, req); err != nil {
			m.drop(a)
			return api.Sandbox{}, false, err
		}
		if req.Start != nil {
			if err := req.Start.CheckShape(); err != nil {
				m.drop(a)
				return api.Sandbox{}, false, err
			}
			s := *req.Start
			a.rec.Start = &s
		}
		if req.Snapshot != "" {
			if err := validSnapshotID(req.Snapshot); err != nil {
				return api.Sandbox{}, false, err
			}
			if err := m.fromSnapshot(ctx, &a.rec, req.Snapshot, req.Image); err != nil {
				m.drop(a)
				return api.Sandbox{}, false, err
			}
		}
		release, err := m.admit(ctx, &a.rec)
		if err != nil {
			m.drop(a)
			return api.Sandbox{}, false, err
		}
		defer release()
		m.bindReserved(a)
		if err := m.save(ctx, a); err != nil {
			m.drop(a)
			return api.Sandbox{}, false, err
		}
		m.journal(ctx, a.name, "create", a.rec.ID)
		created = true
	}
	m.touch(a)
	if a.rec.State != api.StateRunning {
		if err := m.startFresh(ctx, a, created); err != nil {
			if created && errors.As(err, new(beforeSandbox)) {
				// A create that failed before its sandbox existed (a
				// missing image, say) leaves nothing: the name stays free.
				m.forgetFailedCreate(ctx, a, err)
				return api.Sandbox{}, false, err
			}
			return m.view(a), created, err
		}
	}
	return m.view(a), created, nil
}

// forgetFailedCreate removes the record of a sandbox whose first start
// failed before anything but its record existed. Callers hold a.mu.
func (m *Manager) forgetFailedCreate(ctx context.Context, a *actor, cause error) {
	ctx = context.WithoutCancel(ctx)
	if err := m.cfg.Rootfs.Remove(ctx, a.rec.ID); err != nil {
		m.cfg.Logf("sandbox %s: remove after failed create: %v", a.name, err)
	}
	if err := m.deleteOwned(ctx, a.name); err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
		// The failed record stays; the next create replaces it (the class
		// replaces a failed sandbox that never ran).
		m.cfg.Logf("sandbox %s: forget failed create: %v", a.name, err)
		return
	}
	if m.cfg.Egress != nil {
		m.cfg.Egress.Forget(a.name)
	}
	m.journal(ctx, a.name, "create-failed", cause.Error())
	m.drop(a)
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		for _, d := range s {
			if c == d {
				return true
			}
		}
	}
	return false
}

// applyStartOptions updates the choices that apply at each start.
func applyStartOptions(rec *store.Sandbox, req api.CreateSandboxRequest) error {
	if req.Instance != "" || req.Resources != nil {
		instance, res, err := resolveInstance(req.Instance, req.Resources)
		if err != nil {
			return err
		}
		rec.Instance, rec.Resources = instance, res
	}
	if req.Internet != nil {
		rec.Internet = *req.Internet
		if rec.Network != nil {
			rec.Network.Internet = *req.Internet
		}
	}
	if req.KeepAlive != nil {
		rec.KeepAlive = *req.KeepAlive
	}
	if req.Image != "" && req.Image != rec.Image && req.Image != rec.ImageDigest && rec.ImageDigest != "" {
		return errdefs.FailedPrecondition("sandbox %q holds files made on image %s; destroy it to start from image %q", rec.Name, rec.ImageDigest, req.Image)
	}
	return nil
}

// describe is the compute's view of the sandbox (Get through the class

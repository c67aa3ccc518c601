package controller

import (
	"context"
	"encoding/json"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Class is the class name: object (Sandbox, name) controls sandbox name.
const Class = durable.BuiltinSandboxClass

// SpecKey is the Storage key of the controller's Spec.
const SpecKey = "spec"

// DefaultSleepAfter is how long a sandbox may stay idle when its create
// request names no sleepAfter.
const DefaultSleepAfter = 10 * time.Minute

// Spec is what the controller decided for its sandbox, kept in Storage
// under SpecKey: written at creation and after every start or update
// from what the compute then reports (so changes made through other
// APIs, such as PATCH network or labels, are adopted), read back for
// the idle alarm.
type Spec struct {
	Image       string             `json:"image"`
	ImageDigest string             `json:"imageDigest,omitempty"`
	Snapshot    string             `json:"snapshot,omitempty"` // created from
	Instance    string             `json:"instance"`
	Resources   *api.Resources     `json:"resources,omitempty"` // custom size only
	Internet    bool               `json:"internet"`
	Network     *api.NetworkPolicy `json:"network,omitempty"`
	Isolation   string             `json:"isolation,omitempty"`
	Persist     string             `json:"persist,omitempty"`
	// PersistEvery is the checkpoint period of persist "interval".
	PersistEvery time.Duration `json:"persistEvery,omitempty"`
	// Sleep is the sleep mode (api.Sleep*), "" for the node's default.
	Sleep      string            `json:"sleep,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	SleepAfter time.Duration     `json:"sleepAfter"`
	KeepAlive  bool              `json:"keepAlive,omitempty"`
	// Volumes are the named volumes the sandbox mounts (fixed at creation).
	Volumes []api.VolumeMount `json:"volumes,omitempty"`
	// Start is the sandbox's start command (fixed at creation).
	Start *api.StartCommand `json:"start,omitempty"`
}

// Options configure the class.
type Options struct {
	// Now is the clock the idle alarm decides by (tests move it);
	// default time.Now.
	Now func() time.Time
}

// Register registers the class on h.
func Register(h *durable.Host, o Options) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	return h.Register(Class, (*Sandbox)(nil), func(st *durable.State) (any, error) {
		return &Sandbox{st: st, now: o.Now}, nil
	})
}

// Sandbox is one sandbox's controller object. Its exported methods are
// callable over RPC: POST /v1/objects/Sandbox/{name}/{method}.
type Sandbox struct {
	st  *durable.State
	now func() time.Time
}

// CreateArgs are GetOrCreate's arguments.
type CreateArgs struct {
	Request    api.CreateSandboxRequest `json:"request"`
	CreateOnly bool                     `json:"createOnly,omitempty"`
}

// CreateResult is GetOrCreate's result.
type CreateResult struct {
	Sandbox api.Sandbox `json:"sandbox"`
	Created bool        `json:"created"`
}

// GetOrCreate returns the sandbox, creating it or waking it as needed (as
// POST /v1/sandboxes/{name} does). With CreateOnly an existing sandbox is
// already exists. A request to an existing sandbox applies its instance,
// resources, internet, network and keepAlive from this start on.
func (s *Sandbox) GetOrCreate(ctx context.Context, a CreateArgs) (CreateResult, error) {
	req := a.Request
	st, err := s.st.Container.Status(ctx)
	if err != nil {
		return CreateResult{}, err
	}
	if st.Exists && neverRan(st) {
		// A sandbox whose first start failed holds nothing of the
		// caller's: a create retries with the request's own spec (image,
		// env, …) rather than the failed one's.
		if err := s.st.Container.Destroy(context.WithoutCancel(ctx), "replaced by a new create"); err != nil {
			return CreateResult{}, err
		}
		_ = s.st.Storage.Delete(ctx, SpecKey)
		st.Exists = false
	}
	if !st.Exists {
		return s.create(ctx, req)
	}
	if a.CreateOnly {
		return CreateResult{}, errdefs.AlreadyExists("sandbox %q already exists", s.st.Container.Name())
	}
	sb, err := s.ensure(ctx, st, req)
	return CreateResult{Sandbox: sb}, err
}

// neverRan reports whether the sandbox failed before it ever ran: no
// image digest is recorded until a first start succeeds.
func neverRan(st durable.Status) bool {
	return st.State == api.StateFailed && st.Sandbox.ImageDigest == "" && st.Sandbox.Snapshot == ""
}

func (s *Sandbox) create(ctx context.Context, req api.CreateSandboxRequest) (CreateResult, error) {
	if req.Image != "" && req.Snapshot != "" {
		return CreateResult{}, errdefs.InvalidArgument("give an image or a snapshot, not both: a snapshot starts from its own base image")
	}
	sleepAfter := DefaultSleepAfter
	if req.SleepAfter != "" {
		d, err := time.ParseDuration(req.SleepAfter)
		if err != nil || d < time.Second || d > 30*24*time.Hour {
			return CreateResult{}, errdefs.InvalidArgument("sleepAfter %q must be a duration between 1s and 720h, like \"30s\" or \"10m\"", req.SleepAfter)
		}
		sleepAfter = d
	}
	spec := Spec{
		Image: req.Image, Snapshot: req.Snapshot, Instance: req.Instance, Resources: req.Resources,
		Internet: req.Internet != nil && *req.Internet, Network: req.Network, Isolation: req.Isolation,
		Persist: req.Persist, Env: req.Env, Labels: req.Labels, SleepAfter: sleepAfter,
		KeepAlive: req.KeepAlive != nil && *req.KeepAlive, Sleep: req.Sleep, Volumes: req.Volumes,
		Start: req.Start,
	}
	if err := api.ValidSleepMode(req.Sleep); err != nil {
		return CreateResult{}, err
	}
	every, err := api.ParsePersistEvery(req.Persist, req.PersistEvery)
	if err != nil {
		return CreateResult{}, err
	}
	spec.PersistEvery = every
	o := spec.startOptions()
	if spec.Snapshot != "" {
		o.Snapshot = &durable.SnapshotHandle{ID: spec.Snapshot}
	}
	err = s.start(ctx, spec, o)
	st, serr := s.st.Container.Status(ctx)
	if serr != nil {
		return CreateResult{}, serr
	}
	if !st.Exists {
		// Refused before anything was created (policy, validation).
		_ = s.st.DeleteAlarm(ctx)
		if err == nil {
			err = errdefs.Internal("sandbox %q vanished after its start", s.st.Container.Name())
		}
		return CreateResult{}, err
	}
	if err != nil && spec.Snapshot != "" {
		// A failed restore leaves no partial state: a create from a
		// snapshot whose blob does not verify or unpack is removed (it
		// holds no files of the user's yet). Other failed creates stay in
		// state failed, and the next request retries them.
		ctx := context.WithoutCancel(ctx)
		if derr := s.st.Container.Destroy(ctx, "create failed"); derr != nil {
			return CreateResult{Sandbox: st.Sandbox, Created: true}, err
		}
		_ = s.st.Storage.Delete(ctx, SpecKey)
		_ = s.st.DeleteAlarm(ctx)
		return CreateResult{}, err
	}
	if perr := s.settle(ctx, st, spec); perr != nil {
		err = perr
	}
	return CreateResult{Sandbox: st.Sandbox, Created: true}, err
}

// ensure makes an existing sandbox run with what req names.
func (s *Sandbox) ensure(ctx context.Context, st durable.Status, req api.CreateSandboxRequest) (api.Sandbox, error) {
	cur := st.Sandbox
	spec, err := s.Spec(ctx)
	if err != nil {
		return api.Sandbox{}, err
	}
	old := spec
	// The request's choices apply from this start on; what it leaves out
	// stays as the sandbox has it.
	o := durable.StartOptions{
		Image: req.Image, Instance: req.Instance, Internet: cur.Internet, Network: req.Network,
		Isolation: req.Isolation, SleepAfter: spec.SleepAfter, KeepAlive: spec.KeepAlive, SelfSleep: true,
	}
	if req.Resources != nil {
		o.Resources = &durable.Resources{VCPU: req.Resources.VCPU, MemoryMiB: req.Resources.MemoryMiB, DiskMB: req.Resources.DiskMB}
	}
	if req.Internet != nil {
		o.Internet = *req.Internet
	}
	if req.KeepAlive != nil {
		o.KeepAlive = *req.KeepAlive
		spec.KeepAlive = o.KeepAlive
	}
	if st.Running {
		err = s.st.Container.Update(ctx, o)
	} else {
		err = s.start(ctx, spec, o)
	}
	st2, serr := s.st.Container.Status(ctx)
	if err != nil {
		// Refused, or the start failed (the sandbox is marked failed and
		// the next request retries): the spec stays as it was.
		if serr == nil {
			_ = s.armIdle(ctx, st2, old)
		}
		return cur, err
	}
	if serr != nil {
		return cur, serr
	}
	return st2.Sandbox, s.settle(ctx, st2, spec)
}

// start starts the compute with the idle alarm armed first, so a crash
// right after the start still leaves a running sandbox an alarm (whose
// handler re-checks the activity before it acts).
func (s *Sandbox) start(ctx context.Context, spec Spec, o durable.StartOptions) error {
	if !spec.KeepAlive {
		if err := s.st.SetAlarm(ctx, s.now().Add(spec.SleepAfter)); err != nil {
			return err
		}
	}
	return s.st.Container.Start(ctx, o)
}

// settle records the spec as the compute now reports it and arms the
// idle alarm to match.
func (s *Sandbox) settle(ctx context.Context, st durable.Status, spec Spec) error {
	spec = specFrom(st.Sandbox, spec.SleepAfter, spec.KeepAlive)
	var prev Spec
	ok, err := s.st.Storage.Get(ctx, SpecKey, &prev)
	if err != nil {
		return err
	}
	if !ok || !sameJSON(prev, spec) {
		if err := s.st.Storage.Put(ctx, SpecKey, spec); err != nil {
			return err
		}
	}
	return s.armIdle(ctx, st, spec)
}

// armIdle sets the alarm at the moment the sandbox falls idle.
func (s *Sandbox) armIdle(ctx context.Context, st durable.Status, spec Spec) error {
	if !st.Running || spec.KeepAlive {
		return s.st.DeleteAlarm(ctx)
	}
	at := st.LastActive.Add(spec.SleepAfter)
	if st.Busy {
		at = s.now().Add(spec.SleepAfter)
	}
	return s.st.SetAlarm(ctx, at)
}

// Alarm puts the sandbox to sleep if it has been idle for its sleepAfter,
// else moves the alarm to the new deadline. Deliveries are at least
// once: a duplicate or stale one finds the sandbox asleep, gone or
// active, and does nothing but re-arm.
func (s *Sandbox) Alarm(ctx context.Context, info durable.AlarmInfo) error {
	st, err := s.st.Container.Status(ctx)
	if err != nil {
		return err // retried
	}
	if !st.Exists {
		// Destroyed by other means (another class's Container.Destroy).
		return s.st.Storage.Delete(ctx, SpecKey)
	}
	if !st.Running {
		return nil // the next start arms it again
	}
	spec, err := s.Spec(ctx)
	if err != nil {
		return err
	}
	if spec.KeepAlive {
		return nil
	}
	if st.Busy || s.now().Before(st.LastActive.Add(spec.SleepAfter)) {
		return s.armIdle(ctx, st, spec)
	}
	stopped, err := s.st.Container.StopIfIdle(ctx, "idle for "+spec.SleepAfter.String(), st.LastActive)
	if err != nil || stopped {
		return err
	}
	// Activity came in while deciding: wait for the new deadline.
	if st, err = s.st.Container.Status(ctx); err != nil {
		return err
	}
	return s.armIdle(ctx, st, spec)
}

// Get returns the sandbox without waking it.
func (s *Sandbox) Get(ctx context.Context) (api.Sandbox, error) {
	return s.st.Container.Describe(ctx)
}

// Refresh records the spec as the compute now has it, after a change that
// did not come through this object (a PATCH of network or labels), so
// Storage does not lag until the next start.
func (s *Sandbox) Refresh(ctx context.Context) (api.Sandbox, error) {
	st, err := s.st.Container.Status(ctx)
	if err != nil {
		return api.Sandbox{}, err
	}
	if !st.Exists {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", s.st.Container.Name())
	}
	spec, err := s.Spec(ctx)
	if err != nil {
		return api.Sandbox{}, err
	}
	return st.Sandbox, s.settle(ctx, st, spec)
}

// Wake starts the sandbox if it sleeps (it never creates one).
func (s *Sandbox) Wake(ctx context.Context) (api.Sandbox, error) {
	st, err := s.st.Container.Status(ctx)
	if err != nil {
		return api.Sandbox{}, err
	}
	if !st.Exists {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", s.st.Container.Name())
	}
	if st.Running {
		return st.Sandbox, nil
	}
	return s.ensure(ctx, st, api.CreateSandboxRequest{})
}

// Sleep stops the sandbox's compute now, keeping its files.
func (s *Sandbox) Sleep(ctx context.Context) error {
	if _, err := s.st.Container.Describe(ctx); err != nil {
		return err
	}
	if err := s.st.Container.Stop(ctx, "requested"); err != nil {
		return err
	}
	return s.st.DeleteAlarm(ctx)
}

// Destroy removes the sandbox: its compute, files and the controller's
// spec and alarm. Destroying a missing sandbox is not found.
func (s *Sandbox) Destroy(ctx context.Context) error {
	if _, err := s.st.Container.Describe(ctx); err != nil {
		return err
	}
	// It must finish even if the caller goes away mid-way.
	ctx = context.WithoutCancel(ctx)
	if err := s.st.Container.Destroy(ctx, "requested"); err != nil {
		return err
	}
	if err := s.st.Storage.Delete(ctx, SpecKey); err != nil {
		return err
	}
	return s.st.DeleteAlarm(ctx)
}

// Spec returns the controller's spec of the sandbox. A sandbox the class
// has not started yet (made by another class, or before the controller
// moved onto this class) gets one from what the compute reports.
func (s *Sandbox) Spec(ctx context.Context) (Spec, error) {
	var spec Spec
	ok, err := s.st.Storage.Get(ctx, SpecKey, &spec)
	if err != nil || ok {
		return spec, err
	}
	sb, err := s.st.Container.Describe(ctx)
	if err != nil {
		return Spec{}, err
	}
	d, err := time.ParseDuration(sb.SleepAfter)
	if err != nil || d <= 0 {
		d = DefaultSleepAfter
	}
	return specFrom(sb, d, sb.KeepAlive), nil
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func specFrom(sb api.Sandbox, sleepAfter time.Duration, keepAlive bool) Spec {
	sp := Spec{
		Image: sb.Image, ImageDigest: sb.ImageDigest, Snapshot: sb.Snapshot, Instance: sb.Instance,
		Internet: sb.Internet, Network: sb.Network, Isolation: sb.Isolation, Persist: sb.Persist,
		Env: sb.Env, Labels: sb.Labels, SleepAfter: sleepAfter, KeepAlive: keepAlive,
		Sleep: sb.Sleep, Volumes: sb.Volumes, Start: sb.Start,
	}
	if sb.PersistEvery != "" {
		sp.PersistEvery, _ = time.ParseDuration(sb.PersistEvery)
	}
	if sb.Instance == "custom" {
		r := sb.Resources
		sp.Resources = &r
	}
	return sp
}

// startOptions is what a new sandbox starts with.
func (sp Spec) startOptions() durable.StartOptions {
	o := durable.StartOptions{
		Image: sp.Image, Instance: sp.Instance, Internet: sp.Internet, Env: sp.Env, Labels: sp.Labels,
		Network: sp.Network, Isolation: sp.Isolation, Persist: sp.Persist, PersistEvery: sp.PersistEvery,
		SleepAfter: sp.SleepAfter, KeepAlive: sp.KeepAlive, SelfSleep: true, Sleep: sp.Sleep, Volumes: sp.Volumes,
		Start: sp.Start,
	}
	if sp.Resources != nil {
		o.Resources = &durable.Resources{VCPU: sp.Resources.VCPU, MemoryMiB: sp.Resources.MemoryMiB, DiskMB: sp.Resources.DiskMB}
	}
	return o
}

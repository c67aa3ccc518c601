package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/weaken"
)

// Paths inside the sandbox where berth mounts its pieces. /.berth is not
// part of any image, so user files never collide with it.
const (
	agentPathInSandbox = "/.berth/bin/berth-agent"
	socketDirInSandbox = "/.berth/run"
)

// beforeSandbox marks a start failure from before the sandbox's writable
// layer existed (the image, the snapshot's layers, the user namespace).
type beforeSandbox struct{ err error }

func (e beforeSandbox) Error() string { return e.err.Error() }
func (e beforeSandbox) Unwrap() error { return e.err }

// restartableTimeout hands out contexts with a timeout of d from base;
// each fresh one cancels the one before, so a clock can start over.
type restartableTimeout struct {
	base   context.Context
	d      time.Duration
	cancel context.CancelFunc
}

func (r *restartableTimeout) fresh() context.Context {
	r.stop()
	ctx, cancel := context.WithTimeout(r.base, r.d)
	r.cancel = cancel
	return ctx
}

func (r *restartableTimeout) stop() {
	if r.cancel != nil {
		r.cancel()
	}
}

func (m *Manager) sandboxDir(id string) string { return filepath.Join(m.cfg.RunDir, "sandboxes", id) }

// start brings a's compute up: image → rootfs → network → container →
// agent ready. The record is persisted as starting first, so a crash at
// any step leaves a state that Reconcile knows how to clean. Callers hold
// a.mu. On failure everything started is torn down again and the sandbox
// is marked failed (its writable layer is kept; the next request retries),
// except a wake that failed before the sandbox was set up, which leaves it
// sleeping.
func (m *Manager) start(ctx context.Context, a *actor) (err error) {
	if a.rec.State == api.StateSleeping && m.cfg.MayWake != nil {
		if err := m.cfg.MayWake(ctx, a.rec); err != nil {
			return err
		}
	}
	if a.rec.State == api.StateSleeping {
		if a.rec.SleepTier != api.SleepFreeze {
			a.rec.LastWake = "" // a stop tier's wake always boots from files
		} else if m.wakeFrozen(ctx, a) {
			return nil
		}
	}
	// A start runs to completion even if the request that caused it is
	// cancelled: other callers may be waiting on the same actor.
	base := context.WithoutCancel(ctx)
	clock := &restartableTimeout{base: base, d: m.cfg.StartTimeout}
	defer clock.stop()
	ctx = clock.fresh()
	t0 := time.Now()
	sp := steps{last: t0}
	rec := &a.rec
	wasSleeping := rec.State == api.StateSleeping
	prevError := rec.Error
	rec.State, rec.Error = api.StateStarting, ""
	rec.ExitCode = nil
	if err := m.save(ctx, a); err != nil {
		return err
	}
	failpoint.Hit("start.persisted")
	sp.mark("save")
	defer func() {
		if err == nil {
			return
		}
		m.cfg.Logf("sandbox %s (%s): start failed: %v", a.name, rec.ID, err)
		if cerr := m.stopCompute(ctx, a); cerr != nil {
			m.cfg.Logf("sandbox %s: cleanup after failed start: %v", a.name, cerr)
		}
		rec.State, rec.Error = api.StateFailed, err.Error()
		if wasSleeping && errors.As(err, new(beforeSandbox)) {
			// A wake that failed before anything of the sandbox was
			// set up (its image or snapshot chain could not be had: the
			// blob store is down, say) changed nothing: it sleeps as it
			// did, and the next request tries the wake again.
			rec.State, rec.Error = api.StateSleeping, prevError
		}
		if serr := m.save(ctx, a); serr != nil {
			m.cfg.Logf("sandbox %s: %v", a.name, serr)
		}
		m.journal(ctx, a.name, "start-failed", err.Error())
	}()

	ref := rec.Image
	if rec.ImageDigest != "" {
		ref = rec.ImageDigest // a sandbox always restarts from the digest it began with
	}
	// Until the writable layer is mounted nothing of the sandbox exists
	// but its record: failures up to there are beforeSandbox, and a
	// fresh create that fails so leaves nothing (startSandbox).
	// The image has a clock of its own: a node that lacks it fetches and
	// unpacks it from the shared blob store first, which can take minutes.
	// The start's clock begins once it is ready.
	pctx, pcancel := context.WithTimeout(base, m.cfg.ImageTimeout)
	img, err := m.prepare(pctx, ref)
	pcancel()
	ctx = clock.fresh() // the failure cleanup above uses it too
	if err != nil {
		return beforeSandbox{err}
	}
	var startCmd *api.StartProcessRequest
	if rec.Start != nil {
		req, err := startProcessRequest(*rec.Start, img)
		if err != nil {
			return beforeSandbox{err}
		}
		startCmd = &req
	}
	sp.mark("image")
	snapDirs, err := m.snapshotLowers(ctx, rec)
	if err != nil {
		return beforeSandbox{err}
	}
	lowers := append(append([]string(nil), img.LayerDirs...), snapDirs...)
	var userns IDRange
	if isolationOf(*rec) == api.IsolationRunc {
		// gVisor's sentry is the boundary there; its runsc runs the
		// sandbox in its own user namespace without a host id map.
		if userns, err = m.userNS(ctx, a); err != nil {
			return beforeSandbox{err}
		}
	}
	// The network (nft set members, netns, veth, addresses) and the
	// rootfs (subvolume, quota, idmapped layers, overlay) share nothing:
	// they are made side by side, and both are done before either's
	// failure returns, so the cleanup of a failed start sees all of it.
	pol := policyOf(*rec)
	var att Attachment
	var netErr error
	netDone := make(chan struct{})
	go func() {
		defer close(netDone)
		att, netErr = m.cfg.Network.Setup(ctx, rec.ID, m.rawInternet(pol))
	}()
	rootfs, err := m.cfg.Rootfs.Mount(ctx, rec.ID, lowers, rec.Resources.DiskMB*1000*1000, userns)
	<-netDone
	if err != nil {
		return fmt.Errorf("mount rootfs: %w", err)
	}
	failpoint.Hit("start.rootfs-mounted")
	sp.mark("rootfs+network")
	if netErr != nil {
		err := fmt.Errorf("network: %w", netErr)
		if errdefs.IsKind(netErr, errdefs.ErrResourceExhausted) {
			// No address or bridge port was free: the network made
			// nothing, and the rootfs goes with the failure's cleanup
			// (stopCompute, forgetFailedCreate). A create so refused
			// leaves nothing, a wake stays asleep: the host is full,
			// not the sandbox broken.
			return beforeSandbox{err}
		}
		return err
	}
	var extraEnv map[string]string
	if m.cfg.Egress != nil {
		// The CA goes into the writable layer before any process runs, so
		// TLS clients trust intercepted hosts from the first request. A
		// trust store the sandbox broke itself (a FIFO, a directory) only
		// costs it injection, not its start.
		install := func() error { return m.cfg.Egress.InstallCA(rootfs) }
		if userns.Size > 0 {
			// Host root has no mapping on the idmapped rootfs; write as
			// the sandbox's root.
			install = func() error {
				return rootfsAsMappedRoot(userns.HostID, func() error { return m.cfg.Egress.InstallCA(rootfs) })
			}
		}
		if err := install(); err != nil {
			m.cfg.Logf("sandbox %s: %v", a.name, err)
			m.journal(ctx, a.name, "egress-ca", err.Error())
		}
		if err := m.cfg.Egress.Attach(a.name, att.IP, pol); err != nil {
			return fmt.Errorf("egress: %w", err)
		}
		extraEnv = egress.SandboxEnv()
	}
	failpoint.Hit("start.network-ready")
	sp.mark("egress")
	a.rootfs = rootfs
	if err := m.attachVolumes(ctx, a, userns); err != nil {
		return err
	}
	if len(rec.Volumes) > 0 {
		sp.mark("volumes")
	}

	dir := m.sandboxDir(rec.ID)
	agentDir := filepath.Join(dir, "agent")
	etcDir := filepath.Join(dir, "etc")
	bundle := filepath.Join(dir, "bundle")
	// dir is host-only (0700): nothing in it is reachable from a sandbox
	// except agentDir, which is bind-mounted and therefore treated as
	// sandbox-writable (see agentclient's dialing).
	for _, d := range []string{dir, agentDir, etcDir, bundle} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("prepare %s: %w", d, err)
		}
	}
	_ = os.Remove(filepath.Join(agentDir, wire.SocketName))
	if err := chownTo(agentDir, userns); err != nil {
		return err
	}
	if err := m.writeEtc(etcDir, a.name, att, rec.Internet || m.cfg.Egress != nil); err != nil {
		return err
	}
	b := Bundle{
		ID: rec.ID, Hostname: a.name, RootfsPath: rootfs,
		Args:        imageAgentArgs(img),
		Env:         sandboxEnv(img.Env, extraEnv, rec.Env, a.name),
		Cwd:         "/",
		MilliCPU:    int64(rec.Resources.VCPU * 1000),
		MemoryBytes: rec.Resources.MemoryMiB << 20,
		Pids:        pidsLimit(rec.Resources),
		NetNSPath:   att.NetNSPath,
		UserNS:      userns,
		Isolation:   isolationOf(*rec),
		Binds: []Bind{
			{Source: m.cfg.AgentBinary, Target: agentPathInSandbox, RO: true},
			// sudo without setuid (no_new_privs is on): the agent binary
			// run as sudo asks the agent (agent/sudo.go).
			{Source: m.cfg.AgentBinary, Target: "/usr/bin/sudo", RO: true},
			{Source: agentDir, Target: socketDirInSandbox},
			{Source: filepath.Join(etcDir, "hosts"), Target: "/etc/hosts", RO: true},
			{Source: filepath.Join(etcDir, "hostname"), Target: "/etc/hostname", RO: true},
			{Source: filepath.Join(etcDir, "resolv.conf"), Target: "/etc/resolv.conf", RO: true},
		},
	}
	// A container left by a crash under this id would make create fail.
	if err := m.cfg.Runtime.Delete(ctx, rec.ID, true); err != nil {
		return fmt.Errorf("remove stale container: %w", err)
	}
	if err := m.cfg.Runtime.WriteBundle(bundle, b); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	sp.mark("bundle")
	if err := m.cfg.Runtime.Run(ctx, rec.ID, bundle); err != nil {
		return fmt.Errorf("run container: %w", err)
	}
	failpoint.Hit("start.container-created")
	sp.mark("runc")
	ag := agentclient.New(filepath.Join(agentDir, wire.SocketName))
	if err := ag.WaitReady(ctx); err != nil {
		ag.Close()
		return fmt.Errorf("agent did not become ready: %w", err)
	}
	a.agent = ag
	sp.mark("agent")
	if err := m.cfg.Runtime.Verify(ctx, rec.ID, bundle); err != nil {
		return err
	}
	sp.mark("posture")
	now := time.Now().UTC()
	rec.State, rec.StartedAt, rec.ImageDigest, rec.OOMKilled = api.StateRunning, now, img.Digest, false
	rec.SleepTier, rec.FrozenAt = "", time.Time{}
	rec.RunID = newArtifactID("run_")
	rec.IP = att.IP.String()
	m.touch(a)
	if err := m.save(ctx, a); err != nil {
		return err
	}
	op := "start"
	if wasSleeping {
		op = "wake"
	}
	sp.mark("save")
	m.journal(ctx, a.name, op, fmt.Sprintf("%s in %s (%s)", rec.ID, time.Since(t0).Round(time.Millisecond), &sp))
	if startCmd != nil {
		m.runStartCommand(ctx, a, *startCmd)
	}
	m.cfg.Meter.StartDone(startPath(wasSleeping, rec.Snapshot, rec.PersistSnapshot), time.Since(t0))
	go m.watchInit(a.name, rec.ID, bundle, rec.RunID)
	return nil
}

// steps times the steps of a start, for its journal entry: "save 1.2,
// image 0.1, rootfs 4.0, …" in milliseconds, a step's name repeated when
// it comes back.
type steps struct {
	last time.Time
	b    strings.Builder
}

func (s *steps) mark(name string) {
	now := time.Now()
	if s.b.Len() > 0 {
		s.b.WriteString(", ")
	}
	fmt.Fprintf(&s.b, "%s %.1f", name, float64(now.Sub(s.last).Microseconds())/1000)
	s.last = now
}

func (s *steps) String() string { return s.b.String() + " ms" }

// agentArgs is the agent's command line.
// imageAgentArgs adds an image's USER and WORKDIR as the agent's defaults
// for execs that name neither. Images without them (the default base)
// keep berth's defaults: user "user" (else root) in its home.
func imageAgentArgs(img Image) []string {
	args := agentArgs()
	if u, _, _ := strings.Cut(img.User, ":"); u != "" {
		args = append(args, "--default-user", u) // the agent runs it with its own primary group
	}
	if img.WorkingDir != "" && img.WorkingDir != "/" {
		args = append(args, "--default-cwd", img.WorkingDir)
	}
	return args
}

func agentArgs() []string {
	args := []string{agentPathInSandbox, "--socket", socketDirInSandbox + "/" + wire.SocketName}
	if weaken.Off(weaken.FDAllowlist) {
		args = append(args, "--no-fd-check")
	}
	if weaken.Off(weaken.AgentLogCap) {
		args = append(args, "--no-log-cap")
	}
	return args
}

// writeEtc writes the files berth owns inside the sandbox's /etc.
func (m *Manager) writeEtc(dir, name string, att Attachment, internet bool) error {
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n"
	if att.IP.IsValid() {
		hosts += att.IP.String() + "\t" + name + "\n"
	}
	resolv := "# berth: this sandbox has no internet access\n"
	if internet {
		var b strings.Builder
		for _, s := range m.cfg.DNS {
			b.WriteString("nameserver " + s + "\n")
		}
		resolv = b.String()
	}
	for file, content := range map[string]string{"hosts": hosts, "hostname": name + "\n", "resolv.conf": resolv} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", file, err)
		}
	}
	return nil
}

// sandboxEnv is the agent's environment: image env, then berth's (the
// egress CA paths), then sandbox env (which wins), then BERTH_SANDBOX.
// Sorted so the spec is deterministic.
func sandboxEnv(image []string, berth, env map[string]string, name string) []string {
	merged := map[string]string{}
	for _, kv := range image {
		if k, v, ok := strings.Cut(kv, "="); ok {
			merged[k] = v
		}
	}
	if merged["PATH"] == "" {
		merged["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	api.Env(berth).ApplyTo(merged)
	api.Env(env).ApplyTo(merged) // a null in the sandbox's env unsets an image variable
	merged["BERTH_SANDBOX"] = name
	out := make([]string, 0, len(merged))
	for k, v := range merged {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// stopCompute removes the container, network and rootfs mount of a, keeping
// its writable layer. It is idempotent. Callers hold a.mu.
func (m *Manager) stopCompute(ctx context.Context, a *actor) error {
	id := a.rec.ID
	if m.cfg.Previews != nil {
		m.cfg.Previews.Revoke(a.name, 0) // end preview tunnels with the run
	}
	if a.agent != nil {
		a.agent.Close()
		a.agent = nil
	}
	a.entrypoint = false
	if a.rec.SleepTier == api.SleepFreeze {
		if fz, ok := m.cfg.Runtime.(Freezer); ok {
			// A frozen container's processes cannot die until thawed
			// (the v1 freezer): thaw, then the forced delete kills them.
			_ = fz.Thaw(ctx, id)
		}
	}
	if m.cfg.Runtime.OOMKilled(id) {
		if !a.rec.OOMKilled {
			// The lifecycle event sandbox.oom-killed (package events):
			// seen when the run ends, once per run.
			m.journal(ctx, a.name, "oom-killed", id+": the kernel's OOM killer ended a process of this run")
		}
		a.rec.OOMKilled = true
	}
	if m.cfg.Egress != nil {
		m.cfg.Egress.Detach(a.name)
	}
	// A forced delete kills every process of the container (SIGKILL)
	// before it removes it: no separate kill, one runtime spawn less.
	if err := m.cfg.Runtime.Delete(ctx, id, true); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	failpoint.Hit("stop.container-deleted")
	if err := m.cfg.Network.Teardown(ctx, id); err != nil {
		return fmt.Errorf("network teardown %s: %w", id, err)
	}
	if err := m.detachVolumes(ctx, a); err != nil {
		return err
	}
	if err := m.cfg.Rootfs.Unmount(ctx, id); err != nil {
		return fmt.Errorf("unmount rootfs %s: %w", id, err)
	}
	if err := m.cfg.Runtime.ReleaseBundle(m.sandboxDir(id)); err != nil {
		return fmt.Errorf("release bundle %s: %w", id, err)
	}
	if err := os.RemoveAll(m.sandboxDir(id)); err != nil {
		return fmt.Errorf("remove run dir %s: %w", id, err)
	}
	return nil
}

// touch records API activity, pushing the sleepAfter alarm back.
func (m *Manager) touch(a *actor) {
	a.actMu.Lock()
	a.lastActive = time.Now().UTC()
	a.actMu.Unlock()
}

// use makes sure the named sandbox runs (waking it if it sleeps) and marks
// an operation in flight; the sandbox cannot fall asleep until release is
// called. It never creates a sandbox.
func (m *Manager) use(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if err := ValidName(name); err != nil {
		return nil, nil, err
	}
	woken := false
again:
	a, err := m.lock(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if !a.exists {
		m.drop(a)
		a.mu.Unlock()
		return nil, nil, errdefs.NotFound("sandbox %q not found", name)
	}
	if (a.rec.State != api.StateRunning || a.agent == nil) && m.objects != nil && !woken {
		// Woken by its controller object, which chooses how it starts
		// and arms its idle alarm; then look again.
		a.mu.Unlock()
		if err := m.wake(ctx, name); err != nil {
			return nil, nil, err
		}
		woken = true
		goto again
	}
	if a.rec.State != api.StateRunning || a.agent == nil {
		admitted, err := m.admit(ctx, &a.rec)
		if err != nil {
			a.mu.Unlock()
			return nil, nil, err
		}
		err = m.start(ctx, a)
		admitted()
		if err != nil {
			a.mu.Unlock()
			return nil, nil, err
		}
	}
	return m.hold(a)
}

// hold marks an operation in flight on a's running sandbox and unlocks
// a.mu: the sandbox cannot fall asleep until release is called.
func (m *Manager) hold(a *actor) (*agentclient.Client, func(), error) {
	ag := a.agent
	a.actMu.Lock()
	a.active++
	a.lastActive = time.Now().UTC()
	a.actMu.Unlock()
	a.mu.Unlock()
	release := func() {
		a.actMu.Lock()
		a.active--
		a.lastActive = time.Now().UTC()
		a.actMu.Unlock()
	}
	return ag, release, nil
}

// agentOf is node.Node's Agent: the running sandbox's agent, held busy
// until release. Unlike use it never wakes: a sandbox that does not run
// is errdefs.ErrFailedPrecondition, and the control plane decides
// whether to wake it.
func (m *Manager) agentOf(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if err := ValidName(name); err != nil {
		return nil, nil, err
	}
	a, err := m.lock(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if !a.exists {
		m.drop(a)
		a.mu.Unlock()
		return nil, nil, errdefs.NotFound("sandbox %q not found", name)
	}
	if a.rec.State != api.StateRunning || a.agent == nil {
		a.mu.Unlock()
		return nil, nil, errdefs.FailedPrecondition("sandbox %q is not running", name)
	}
	ag, release, err := m.hold(a)
	var once sync.Once
	return ag, func() { once.Do(release) }, err
}

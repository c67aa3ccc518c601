package local

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/failpoint"
	"github.com/berth-sh/berth/internal/weaken"
)

// startMember starts one anonymous pool member of spec and freezes it:
// the same steps, in the same order and with the same bundle, as a cold
// start (lifecycle.go's start), with a placeholder identity (its id as
// hostname, no sandbox env) that the claim replaces. TestPoolMemberBundle
// holds the two bundles equal but for that identity. On failure nothing
// of the member is left.
func (m *Manager) startMember(ctx context.Context, spec PoolSpec) (mb *member, err error) {
	pr, ok := m.cfg.Runtime.(PoolRuntime)
	if !ok {
		return nil, memberErr("runtime", errNoPoolRuntime)
	}
	ctx, cancel := context.WithTimeout(ctx, m.poolStartTimeout())
	defer cancel()
	img, err := m.prepare(ctx, spec.Image)
	if err != nil {
		return nil, memberErr("image", err)
	}
	res := poolResources(spec)
	mb = &member{id: newID(), digest: img.Digest, imgEnv: img.Env, lowers: append([]string(nil), img.LayerDirs...), res: res}
	defer func() {
		if err != nil {
			m.discardMember(context.WithoutCancel(ctx), mb)
		}
	}()
	if spec.Snapshot != "" {
		// The same lowers as a cold restore of it (lifecycle.go's start:
		// the image's layers, then the chain's mounted images).
		if err := m.snapshotsReady(); err != nil {
			return mb, memberErr("snapshot", err)
		}
		sn, err := m.st.GetSnapshot(ctx, spec.Snapshot)
		if err != nil {
			return mb, memberErr("snapshot", err)
		}
		if sn.BaseImageDigest != img.Digest {
			return mb, memberErr("snapshot", errdefs.FailedPrecondition("snapshot %s was taken on image %s, but the pool's %q is %s", sn.ID, sn.BaseImageDigest, spec.Image, img.Digest))
		}
		dirs, err := m.chainDirs(ctx, sn.Chain)
		if err != nil {
			return mb, memberErr("snapshot layers", err)
		}
		ttl := sn.TTL
		if ttl <= 0 {
			ttl = defaultSnapshotTTL
		}
		if err := m.st.TouchSnapshot(ctx, sn.ID, time.Now().Add(ttl)); err != nil {
			return mb, memberErr("snapshot", err)
		}
		mb.lowers = append(mb.lowers, dirs...)
		mb.snapshot, mb.chain = sn.ID, sn.Chain
	}
	if !weaken.Off(weaken.UserNS) {
		h, err := m.allocatePoolUID(ctx)
		if err != nil {
			return mb, memberErr("user namespace", err)
		}
		mb.userns = IDRange{HostID: h, Size: m.cfg.UserNS.Size}
	}
	failpoint.Hit("pool.member-start")
	rootfs, err := m.cfg.Rootfs.Mount(ctx, mb.id, mb.lowers, res.DiskMB*1000*1000, mb.userns)
	if err != nil {
		return mb, memberErr("mount rootfs", err)
	}
	mb.internet = m.rawInternet(api.NetworkPolicy{})
	att, err := m.cfg.Network.Setup(ctx, mb.id, mb.internet)
	if err != nil {
		return mb, memberErr("network", err)
	}
	mb.att = att
	var extraEnv map[string]string
	if m.cfg.Egress != nil {
		install := func() error { return m.cfg.Egress.InstallCA(rootfs) }
		if mb.userns.Size > 0 {
			install = func() error {
				return rootfsAsMappedRoot(mb.userns.HostID, func() error { return m.cfg.Egress.InstallCA(rootfs) })
			}
		}
		if err := install(); err != nil {
			m.cfg.Logf("pool member %s: %v", mb.id, err)
		}
		extraEnv = egress.SandboxEnv()
	}
	dir := m.sandboxDir(mb.id)
	agentDir := filepath.Join(dir, "agent")
	etcDir := filepath.Join(dir, "etc")
	bundle := filepath.Join(dir, "bundle")
	for _, d := range []string{dir, agentDir, etcDir, bundle} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return mb, memberErr("prepare "+d, err)
		}
	}
	if err := chownTo(agentDir, mb.userns); err != nil {
		return mb, memberErr("agent dir", err)
	}
	if err := m.writeEtc(etcDir, mb.id, att, m.cfg.Egress != nil); err != nil {
		return mb, memberErr("etc", err)
	}
	b := m.memberBundle(mb, rootfs, agentDir, etcDir, sandboxEnv(img.Env, extraEnv, nil, ""))
	if err := m.cfg.Runtime.WriteBundle(bundle, b); err != nil {
		return mb, memberErr("write bundle", err)
	}
	if err := m.cfg.Runtime.Run(ctx, mb.id, bundle); err != nil {
		return mb, memberErr("run container", err)
	}
	ag := agentclient.New(filepath.Join(agentDir, wire.SocketName))
	mb.agent = ag
	if err := ag.WaitReady(ctx); err != nil {
		return mb, memberErr("agent did not become ready", err)
	}
	if err := m.cfg.Runtime.Verify(ctx, mb.id, bundle); err != nil {
		return mb, memberErr("posture", err)
	}
	// The agent's connection stays open through the freeze; the claim
	// talks to it as soon as it thaws.
	if err := pr.Freeze(ctx, mb.id); err != nil {
		return mb, memberErr("freeze", err)
	}
	return mb, nil
}

// memberBundle is a member's container: a cold start's bundle
// (lifecycle.go) with the member's placeholder identity and an agent that
// awaits its identity.
func (m *Manager) memberBundle(mb *member, rootfs, agentDir, etcDir string, env []string) Bundle {
	return Bundle{
		ID: mb.id, Hostname: mb.id, RootfsPath: rootfs,
		Args:        append(agentArgs(), "--pool-member"),
		Env:         env,
		Cwd:         "/",
		MilliCPU:    int64(mb.res.VCPU * 1000),
		MemoryBytes: mb.res.MemoryMiB << 20,
		Pids:        pidsLimit(mb.res),
		NetNSPath:   mb.att.NetNSPath,
		UserNS:      mb.userns,
		Isolation:   api.IsolationRunc,
		Binds: []Bind{
			{Source: m.cfg.AgentBinary, Target: agentPathInSandbox, RO: true},
			{Source: m.cfg.AgentBinary, Target: "/usr/bin/sudo", RO: true},
			{Source: agentDir, Target: socketDirInSandbox},
			{Source: filepath.Join(etcDir, "hosts"), Target: "/etc/hosts", RO: true},
			{Source: filepath.Join(etcDir, "hostname"), Target: "/etc/hostname", RO: true},
			{Source: filepath.Join(etcDir, "resolv.conf"), Target: "/etc/resolv.conf", RO: true},
		},
	}
}

// discardMember tears a member down completely: container, network,
// mount, writable layer, run dir and host id range. It never was a
// sandbox, so it leaves no journal or record.
func (m *Manager) discardMember(ctx context.Context, mb *member) {
	if mb.agent != nil {
		mb.agent.Close()
	}
	if pr, ok := m.cfg.Runtime.(PoolRuntime); ok {
		_ = pr.Thaw(ctx, mb.id) // a frozen container dies at once, not at thaw
	}
	_ = m.cfg.Runtime.Kill(ctx, mb.id, syscall.SIGKILL)
	if err := m.cfg.Runtime.Delete(ctx, mb.id, true); err != nil {
		m.cfg.Logf("pool member %s: delete container: %v", mb.id, err)
	}
	if err := m.cfg.Network.Teardown(ctx, mb.id); err != nil {
		m.cfg.Logf("pool member %s: network teardown: %v", mb.id, err)
	}
	if err := m.cfg.Rootfs.Unmount(ctx, mb.id); err != nil {
		m.cfg.Logf("pool member %s: unmount: %v", mb.id, err)
	}
	if err := m.cfg.Rootfs.Remove(ctx, mb.id); err != nil {
		m.cfg.Logf("pool member %s: remove writable layer: %v", mb.id, err)
	}
	if err := m.cfg.Runtime.ReleaseBundle(m.sandboxDir(mb.id)); err != nil {
		m.cfg.Logf("pool member %s: release bundle: %v", mb.id, err)
	}
	_ = os.RemoveAll(m.sandboxDir(mb.id))
	if mb.userns.HostID != 0 && m.pools != nil {
		m.pools.releaseUID(mb.userns.HostID)
	}
}

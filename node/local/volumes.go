package local

import (
	"context"
	"fmt"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/store"
)

// volumesFor checks and records a create's volume mounts. Volumes need
// runc (gVisor's gofer does not see mounts made in the host's view of the
// root) and a sleep that ends the container (checkpoint would have to
// carry the mounts; freeze and stop keep or release them cleanly).
func (m *Manager) volumesFor(rec *store.Sandbox, req api.CreateSandboxRequest) error {
	if len(req.Volumes) == 0 {
		return nil
	}
	if m.cfg.Volumes == nil {
		return errdefs.FailedPrecondition("volumes are not enabled on this node")
	}
	if err := api.ValidateVolumeMounts(req.Volumes); err != nil {
		return err
	}
	if isolationOf(*rec) != api.IsolationRunc {
		return errdefs.InvalidArgument("volumes need isolation %q, not %q", api.IsolationRunc, isolationOf(*rec))
	}
	if rec.Sleep == api.SleepCheckpoint {
		if req.Sleep == api.SleepCheckpoint {
			return errdefs.InvalidArgument("sleep %q is not available for a sandbox with volumes; use %q or %q", api.SleepCheckpoint, api.SleepFreeze, api.SleepStop)
		}
		rec.Sleep = api.SleepStop // the operator's default, which it cannot have
	}
	rec.Volumes = append([]api.VolumeMount(nil), req.Volumes...)
	return nil
}

// attachVolumes mounts the sandbox's volumes into its freshly mounted
// root. A refusal (a volume with another writer, a missing volume) is a
// failure before the sandbox existed: a create so refused leaves nothing,
// a wake stays asleep.
func (m *Manager) attachVolumes(ctx context.Context, a *actor, userns IDRange) error {
	if len(a.rec.Volumes) == 0 {
		return nil
	}
	if m.cfg.Volumes == nil {
		return beforeSandbox{errdefs.FailedPrecondition("volumes are not enabled on this node")}
	}
	if err := m.cfg.Volumes.Attach(ctx, a.name, a.rec.Tenant, a.rootfs, a.rec.Volumes, userns); err != nil {
		if errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || errdefs.IsKind(err, errdefs.ErrNotFound) || errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
			return beforeSandbox{err}
		}
		return fmt.Errorf("volumes: %w", err)
	}
	return nil
}

// detachVolumes releases the sandbox's volumes as its compute stops.
func (m *Manager) detachVolumes(ctx context.Context, a *actor) error {
	if len(a.rec.Volumes) == 0 || m.cfg.Volumes == nil {
		return nil
	}
	root := a.rootfs
	a.rootfs = ""
	if err := m.cfg.Volumes.Detach(ctx, a.name, root, a.rec.Volumes); err != nil {
		return fmt.Errorf("volumes of %s: %w", a.name, err)
	}
	return nil
}

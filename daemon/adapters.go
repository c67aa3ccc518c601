package daemon

import (
	"context"
	"io"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/imagebuild"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/network"
	"github.com/berth-sh/berth/node/local"
	"github.com/berth-sh/berth/rootfs"
	"github.com/berth-sh/berth/runtime"
	"github.com/berth-sh/berth/store"
	"github.com/berth-sh/berth/volume"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// images adapts image.Store to local.Images and server.Images. logf, if
// set, gets the progress of images fetched from the shared blob store.
type images struct {
	s    *image.Store
	logf func(format string, args ...any)
}

// Prepare resolves ref, fetching the image from the shared blob store when
// this node lacks it (image.Store.Ensure), and unpacks its layers.
func (i images) Prepare(ctx context.Context, ref string) (local.Image, error) {
	img, err := i.s.Ensure(ctx, ref, i.fetchLog(ref))
	if err != nil {
		return local.Image{}, err
	}
	dirs, err := i.s.LayerDirs(ctx, img)
	if err != nil {
		return local.Image{}, err
	}
	return local.Image{Digest: img.Digest, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, User: img.Config.User,
		Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, LayerDirs: dirs}, nil
}

// fetchLog logs a fetch's messages and each blob's completion, not every
// byte count.
func (i images) fetchLog(ref string) func(api.Progress) {
	if i.logf == nil {
		return nil
	}
	return func(p api.Progress) {
		if p.Total > 0 && p.Current != p.Total {
			return
		}
		if p.Total > 0 {
			i.logf("image %s: %s (%d bytes)", ref, p.Message, p.Total)
			return
		}
		i.logf("image %s: %s", ref, p.Message)
	}
}

func (i images) ListImages(ctx context.Context) ([]api.Image, error) { return i.s.List(ctx) }

func (i images) PullImage(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error) {
	img, err := i.s.Pull(ctx, req.Ref, req.Name, progress)
	if err != nil {
		return api.Image{}, err
	}
	return img.APIImage(), nil
}

func (i images) ImportImage(ctx context.Context, name string, r io.Reader, progress func(api.Progress)) (api.Image, error) {
	img, err := i.s.Import(ctx, r, name, progress)
	if err != nil {
		return api.Image{}, err
	}
	return img.APIImage(), nil
}

func (i images) BuildBase(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
	img, err := i.s.BuildBase(ctx, image.BuildBaseOptions{}, progress)
	if err != nil {
		return api.Image{}, err
	}
	return img.APIImage(), nil
}

func (i images) RemoveImage(ctx context.Context, ref string) error { return i.s.Remove(ctx, ref) }

// PushImage implements control.ImagePushes: the answer is the stored
// image with Ref set to where it went.
func (i images) PushImage(ctx context.Context, req api.PushRequest, progress func(api.Progress)) (api.Image, error) {
	if _, err := i.s.Push(ctx, req.Image, req.Ref, progress); err != nil {
		return api.Image{}, err
	}
	img, err := i.s.Resolve(ctx, req.Image)
	if err != nil {
		return api.Image{}, err
	}
	out := img.APIImage()
	out.Ref = req.Ref
	return out, nil
}

// templateImages is what the E2B template build API needs: the builder
// and the image store's list, names and removal.
type templateImages struct {
	*imagebuild.Builder
	images
}

func (t templateImages) TagImage(ctx context.Context, name, ref string) error {
	return t.images.s.Tag(ctx, name, ref)
}

// rootfsAdapter adapts rootfs.Manager to local.Rootfs (and, through the
// embedding, local.UpperSnapshots).
type rootfsAdapter struct{ *rootfs.Manager }

func (r rootfsAdapter) Mount(ctx context.Context, id string, lowers []string, diskBytes int64, m local.IDRange) (string, error) {
	return r.Manager.Mount(ctx, id, lowers, diskBytes, rootfs.IDMap{HostID: m.HostID, Size: m.Size})
}

// netAdapter adapts network.Manager to local.Network.
type netAdapter struct{ m *network.Manager }

func (n netAdapter) Setup(ctx context.Context, id string, internet bool) (local.Attachment, error) {
	att, err := n.m.Setup(ctx, id, internet)
	if err != nil {
		return local.Attachment{}, err
	}
	return local.Attachment{NetNSPath: att.NetNSPath, IP: att.IP}, nil
}

func (n netAdapter) Teardown(ctx context.Context, id string) error { return n.m.Teardown(ctx, id) }
func (n netAdapter) Cleanup(ctx context.Context, keep map[string]bool) error {
	return n.m.Cleanup(ctx, keep)
}

// rtAdapter fits runtime.Selector (runc, and runsc for gVisor sandboxes)
// to local.Runtime: it converts types, nothing more.
type rtAdapter struct{ *runtime.Selector }

func (a rtAdapter) State(ctx context.Context, id string) (local.Container, error) {
	s, err := a.Selector.State(ctx, id)
	if err != nil {
		return local.Container{}, err
	}
	return local.Container{ID: s.ID, Status: s.Status, Pid: s.Pid}, nil
}

func (a rtAdapter) List(ctx context.Context) ([]local.Container, error) {
	list, err := a.Selector.List(ctx)
	var out []local.Container
	for _, s := range list {
		out = append(out, local.Container{ID: s.ID, Status: s.Status, Pid: s.Pid})
	}
	return out, err
}

func (a rtAdapter) WriteBundle(dir string, b local.Bundle) error {
	var mounts []specs.Mount
	for _, m := range b.Binds {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.RO {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Source: m.Source, Destination: m.Target, Type: "bind", Options: opts})
	}
	return a.Selector.WriteBundle(dir, b.Isolation == api.IsolationGVisor, runtime.SpecOptions{
		ID: b.ID, Hostname: b.Hostname, RootfsPath: b.RootfsPath,
		Args: b.Args, Env: b.Env, Cwd: b.Cwd,
		Limits:    runtime.Limits{MilliCPU: b.MilliCPU, MemoryBytes: b.MemoryBytes, Pids: b.Pids},
		NetNSPath: b.NetNSPath,
		Mounts:    mounts,
		UserNS:    userNS(b.UserNS),
	})
}

func userNS(r local.IDRange) *runtime.IDMapping {
	if r.Size == 0 {
		return nil
	}
	return &runtime.IDMapping{HostID: r.HostID, Size: r.Size}
}

// Resize gives a running container new limits (a warm pool claim):
// runtime.Selector.Resize with local's units.
func (a rtAdapter) Resize(ctx context.Context, id string, milliCPU, memoryBytes, pids int64) error {
	return a.Selector.Resize(ctx, id, runtime.Limits{MilliCPU: milliCPU, MemoryBytes: memoryBytes, Pids: pids})
}

var _ local.PoolRuntime = rtAdapter{}

// volumesAdapter adapts volume.Manager to local.Volumes.
type volumesAdapter struct{ *volume.Manager }

func (v volumesAdapter) Attach(ctx context.Context, sandbox, tenant, root string, ms []api.VolumeMount, m local.IDRange) error {
	return v.Manager.Attach(ctx, sandbox, tenant, root, ms, rootfs.IDMap{HostID: m.HostID, Size: m.Size})
}

// liveSandbox tells the volume store whether a sandbox still holds its
// volume claims: its record exists and its compute is up (starting,
// running, or asleep in the freeze tier, which keeps its mounts).
func liveSandbox(st store.Store) func(ctx context.Context, name string) bool {
	return func(ctx context.Context, name string) bool {
		sb, err := st.Get(ctx, name)
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			return false
		}
		if err != nil {
			return true // cannot tell: keep the claim
		}
		switch sb.State {
		case api.StateStarting, api.StateRunning:
			return true
		case api.StateSleeping:
			return sb.SleepTier == api.SleepFreeze
		}
		return false
	}
}

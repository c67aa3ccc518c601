package daemon

import (
	"context"
	"io"
	"syscall"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/network"
	"github.com/berth-sh/berth/runtime"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// images adapts image.Store to controller.Images and server.Images.
type images struct{ s *image.Store }

func (i images) Prepare(ctx context.Context, ref string) (controller.Image, error) {
	img, err := i.s.Resolve(ctx, ref)
	if err != nil {
		return controller.Image{}, err
	}
	dirs, err := i.s.LayerDirs(ctx, img)
	if err != nil {
		return controller.Image{}, err
	}
	return controller.Image{Digest: img.Digest, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, LayerDirs: dirs}, nil
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

// netAdapter adapts network.Manager to controller.Network.
type netAdapter struct{ m *network.Manager }

func (n netAdapter) Setup(ctx context.Context, id string, internet bool) (controller.Attachment, error) {
	att, err := n.m.Setup(ctx, id, internet)
	if err != nil {
		return controller.Attachment{}, err
	}
	return controller.Attachment{NetNSPath: att.NetNSPath, IP: att.IP}, nil
}

func (n netAdapter) Teardown(ctx context.Context, id string) error { return n.m.Teardown(ctx, id) }
func (n netAdapter) Cleanup(ctx context.Context, keep map[string]bool) error {
	return n.m.Cleanup(ctx, keep)
}

// rtAdapter adapts runtime.OCI to controller.Runtime.
type rtAdapter struct {
	r          *runtime.OCI
	cgroupRoot string // cgroupsPath parent, e.g. "/berth"
}

func (a rtAdapter) Create(ctx context.Context, id, bundle string) error {
	return a.r.Create(ctx, id, bundle)
}
func (a rtAdapter) Start(ctx context.Context, id string) error { return a.r.Start(ctx, id) }
func (a rtAdapter) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	return a.r.Kill(ctx, id, sig)
}
func (a rtAdapter) Delete(ctx context.Context, id string, force bool) error {
	return a.r.Delete(ctx, id, force)
}

func (a rtAdapter) Pause(ctx context.Context, id string) error  { return a.r.Pause(ctx, id) }
func (a rtAdapter) Resume(ctx context.Context, id string) error { return a.r.Resume(ctx, id) }

func (a rtAdapter) State(ctx context.Context, id string) (controller.Container, error) {
	s, err := a.r.State(ctx, id)
	if err != nil {
		return controller.Container{}, err
	}
	return controller.Container{ID: s.ID, Status: s.Status, Pid: s.Pid}, nil
}

func (a rtAdapter) List(ctx context.Context) ([]controller.Container, error) {
	list, err := a.r.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]controller.Container, 0, len(list))
	for _, s := range list {
		out = append(out, controller.Container{ID: s.ID, Status: s.Status, Pid: s.Pid})
	}
	return out, nil
}

func (a rtAdapter) OOMKilled(id string) bool {
	ok, _ := runtime.OOMKilled(id, a.cgroupRoot+"/"+id)
	return ok
}

func (a rtAdapter) CleanupCgroups(keep map[string]bool) error {
	return runtime.CleanupCgroups(a.cgroupRoot, keep)
}

func (a rtAdapter) WriteBundle(dir string, b controller.Bundle) error {
	var mounts []specs.Mount
	for _, m := range b.Binds {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.RO {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Source: m.Source, Destination: m.Target, Type: "bind", Options: opts})
	}
	spec, err := runtime.Spec(runtime.SpecOptions{
		ID: b.ID, Hostname: b.Hostname, RootfsPath: b.RootfsPath,
		Args: b.Args, Env: b.Env, Cwd: b.Cwd,
		Limits:      runtime.Limits{MilliCPU: b.MilliCPU, MemoryBytes: b.MemoryBytes, Pids: b.Pids},
		NetNSPath:   b.NetNSPath,
		Mounts:      mounts,
		CgroupsPath: a.cgroupRoot + "/" + b.ID,
	})
	if err != nil {
		return err
	}
	return runtime.WriteBundle(dir, spec)
}

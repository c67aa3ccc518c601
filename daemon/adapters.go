package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/network"
	"github.com/berth-sh/berth/rootfs"
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

// rootfsAdapter adapts rootfs.Manager to controller.Rootfs (and, through the
// embedding, controller.UpperSnapshots).
type rootfsAdapter struct{ *rootfs.Manager }

func (r rootfsAdapter) Mount(ctx context.Context, id string, lowers []string, diskBytes int64, m controller.IDRange) (string, error) {
	return r.Manager.Mount(ctx, id, lowers, diskBytes, rootfs.IDMap{HostID: m.HostID, Size: m.Size})
}

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

// rtAdapter adapts runtime.OCI to controller.Runtime. It drives runc and,
// when installed, runsc (gVisor); each container is handled by the runtime
// that created it, which a marker file <runDir>/gvisor/<id> records.
type rtAdapter struct {
	r          *runtime.OCI
	gvisor     *runtime.OCI // nil when runsc is not installed
	runDir     string
	cgroupRoot string // cgroupsPath parent, e.g. "/berth"
}

func (a rtAdapter) marker(id string) string { return filepath.Join(a.runDir, "gvisor", id) }

// pick returns the runtime that owns id.
func (a rtAdapter) pick(id string) *runtime.OCI {
	if a.gvisor != nil {
		if _, err := os.Stat(a.marker(id)); err == nil {
			return a.gvisor
		}
	}
	return a.r
}

// each runs f on every runtime, so an id is found whichever made it.
func (a rtAdapter) each(f func(*runtime.OCI) error) error {
	err := f(a.r)
	if a.gvisor != nil {
		err = errors.Join(err, f(a.gvisor))
	}
	return err
}

func (a rtAdapter) Create(ctx context.Context, id, bundle string) error {
	return a.pick(id).Create(ctx, id, bundle)
}
func (a rtAdapter) Start(ctx context.Context, id string) error { return a.pick(id).Start(ctx, id) }
func (a rtAdapter) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	return a.pick(id).Kill(ctx, id, sig)
}

// Delete removes id from the runtime that owns it, and from runsc too when
// runsc has state for it but the marker is gone (a crash between the two):
// deleting an unknown id costs a process spawn, which every start pays.
func (a rtAdapter) Delete(ctx context.Context, id string, force bool) error {
	r := a.pick(id)
	err := r.Delete(ctx, id, force)
	if r != a.gvisor && a.gvisor != nil {
		if m, _ := filepath.Glob(filepath.Join(a.gvisor.Root, id+"_sandbox:*")); len(m) > 0 {
			err = errors.Join(err, a.gvisor.Delete(ctx, id, force))
		}
	}
	return err
}

func (a rtAdapter) Pause(ctx context.Context, id string) error  { return a.pick(id).Pause(ctx, id) }
func (a rtAdapter) Resume(ctx context.Context, id string) error { return a.pick(id).Resume(ctx, id) }

func (a rtAdapter) State(ctx context.Context, id string) (controller.Container, error) {
	s, err := a.pick(id).State(ctx, id)
	if err != nil {
		return controller.Container{}, err
	}
	return controller.Container{ID: s.ID, Status: s.Status, Pid: s.Pid}, nil
}

func (a rtAdapter) List(ctx context.Context) ([]controller.Container, error) {
	var out []controller.Container
	err := a.each(func(r *runtime.OCI) error {
		list, err := r.List(ctx)
		for _, s := range list {
			out = append(out, controller.Container{ID: s.ID, Status: s.Status, Pid: s.Pid})
		}
		return err
	})
	return out, err
}

func (a rtAdapter) Verify(ctx context.Context, id, bundle string) error {
	if a.pick(id) == a.gvisor {
		return nil // the sandbox's posture is the sentry's; the host sees only runsc
	}
	pid, err := a.InitPid(id, bundle)
	if err != nil {
		return fmt.Errorf("verify posture: %w", err)
	}
	return runtime.VerifyPosture(pid, bundle)
}

// InitPid reads the pid file the runtime wrote at create, not `runc
// state`: one process spawn less on every start.
func (a rtAdapter) InitPid(id, bundle string) (int, error) {
	b, err := os.ReadFile(filepath.Join(bundle, runtime.PidFile))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("bad pid file %q", b)
	}
	return pid, nil
}

func (a rtAdapter) OOMKilled(id string) bool {
	ok, _ := runtime.OOMKilled(id, a.cgroupRoot+"/"+id)
	return ok
}

func (a rtAdapter) CleanupCgroups(keep map[string]bool) error {
	if ents, err := os.ReadDir(filepath.Join(a.runDir, "gvisor")); err == nil {
		for _, e := range ents {
			if !keep[e.Name()] {
				_ = os.Remove(a.marker(e.Name()))
			}
		}
	}
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
	if b.Isolation == api.IsolationGVisor {
		if a.gvisor == nil {
			return errdefs.FailedPrecondition("isolation gvisor: runsc is not installed on this host")
		}
		if err := os.MkdirAll(filepath.Dir(a.marker(b.ID)), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(a.marker(b.ID), nil, 0o600); err != nil {
			return err
		}
	} else if err := os.Remove(a.marker(b.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var sysfs string
	if b.UserNS.Size > 0 && b.NetNSPath != "" {
		sysfs = filepath.Join(dir, "sys")
		_ = runtime.UnmountUnder(sysfs) // a retried start
		if err := runtime.MountSysfs(b.NetNSPath, sysfs); err != nil {
			return err
		}
	}
	spec, err := runtime.Spec(runtime.SpecOptions{
		ID: b.ID, Hostname: b.Hostname, RootfsPath: b.RootfsPath,
		Args: b.Args, Env: b.Env, Cwd: b.Cwd,
		Limits:      runtime.Limits{MilliCPU: b.MilliCPU, MemoryBytes: b.MemoryBytes, Pids: b.Pids},
		NetNSPath:   b.NetNSPath,
		Mounts:      mounts,
		UserNS:      userNS(b.UserNS),
		SysfsSource: sysfs,
		CgroupsPath: a.cgroupRoot + "/" + b.ID,
	})
	if err != nil {
		return err
	}
	return runtime.WriteBundle(dir, spec)
}

func (a rtAdapter) ReleaseBundle(dir string) error { return runtime.UnmountUnder(dir) }

func userNS(r controller.IDRange) *runtime.IDMapping {
	if r.Size == 0 {
		return nil
	}
	return &runtime.IDMapping{HostID: r.HostID, Size: r.Size}
}

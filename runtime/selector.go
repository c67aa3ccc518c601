package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Selector runs each container on the OCI runtime that made it: Default
// (runc) or, for a sandbox with isolation gvisor, GVisor (runsc). The
// choice is a marker file <MarkerDir>/<id>, written with the bundle, so
// that it outlives the daemon: after a restart, reconcile kills, lists
// and deletes containers this process did not create.
type Selector struct {
	Default *OCI
	GVisor  *OCI // nil when runsc is not installed
	// MarkerDir holds one empty file per gVisor container, e.g.
	// <runDir>/gvisor.
	MarkerDir string
	// CgroupRoot is the parent of every container's cgroupsPath, e.g.
	// "/berth".
	CgroupRoot string
}

// NewGVisor returns a driver for runsc with berth's flags (GVisorFlags,
// GVisorStartVia) and its state under root, created host-only: runsc
// would make it 0711.
func NewGVisor(binary, root string) (*OCI, error) {
	r := New(binary, root)
	r.Flags, r.StartVia = GVisorFlags(), GVisorStartVia()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, err
	}
	return r, nil
}

func (s *Selector) marker(id string) string { return filepath.Join(s.MarkerDir, id) }

// IsGVisor reports whether id is (to be) run by runsc.
func (s *Selector) IsGVisor(id string) bool {
	if s.GVisor == nil || validID(id) != nil {
		return false
	}
	_, err := os.Stat(s.marker(id))
	return err == nil
}

// Pick returns the runtime that owns id.
func (s *Selector) Pick(id string) *OCI {
	if s.IsGVisor(id) {
		return s.GVisor
	}
	return s.Default
}

// Each runs f on every runtime, so an id is found whichever made it.
func (s *Selector) Each(f func(*OCI) error) error {
	err := f(s.Default)
	if s.GVisor != nil {
		err = errors.Join(err, f(s.GVisor))
	}
	return err
}

// Choose records which runtime will run id: gVisor, or the default.
// A sandbox that asks for gVisor on a host without runsc fails here,
// before anything is created.
func (s *Selector) Choose(id string, gvisor bool) error {
	if err := validID(id); err != nil {
		return err
	}
	if !gvisor {
		if err := os.Remove(s.marker(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if s.GVisor == nil {
		return errdefs.FailedPrecondition("isolation gvisor: runsc is not installed on this host")
	}
	if err := os.MkdirAll(s.MarkerDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(s.marker(id), nil, 0o600)
}

// CgroupsPath is id's cgroupsPath in its spec.
func (s *Selector) CgroupsPath(id string) string { return s.CgroupRoot + "/" + id }

func (s *Selector) Create(ctx context.Context, id, bundle string) error {
	return s.Pick(id).Create(ctx, id, bundle)
}

func (s *Selector) Start(ctx context.Context, id string) error { return s.Pick(id).Start(ctx, id) }

// Run creates and starts id in one runtime command where the runtime
// can (OCI.Run).
func (s *Selector) Run(ctx context.Context, id, bundle string) error {
	return s.Pick(id).Run(ctx, id, bundle)
}

func (s *Selector) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	return s.Pick(id).Kill(ctx, id, sig)
}

// Delete removes id from the runtime that owns it, and from runsc too when
// runsc has state for it but the marker is gone (a crash between the two):
// a glob of runsc's state dir, not a `runsc delete`, which would cost a
// process spawn on every start.
//
// A runtime that keeps no state for id is not asked at all: deleting an
// unknown id is a no-op success (runc removes a state dir without a
// state.json and returns), and a start's clearing of a crash's leftover
// container would otherwise cost a process spawn every time.
func (s *Selector) Delete(ctx context.Context, id string, force bool) error {
	r := s.Pick(id)
	var err error
	if hasState(r, id) {
		err = r.Delete(ctx, id, force)
	}
	if r != s.GVisor && s.GVisor != nil && s.gvisorHasState(id) {
		err = errors.Join(err, s.GVisor.Delete(ctx, id, force))
	}
	return err
}

// hasState reports whether r may keep state for id: runc and crun keep
// it in <root>/<id>, runsc in <root>/<id>_sandbox:*. Unsure (no root, a
// bad id, an unreadable root) is yes.
func hasState(r *OCI, id string) bool {
	if r.Root == "" || validID(id) != nil {
		return true
	}
	if _, err := os.Lstat(filepath.Join(r.Root, id)); !errors.Is(err, os.ErrNotExist) {
		return true
	}
	m, err := filepath.Glob(filepath.Join(r.Root, id+"_*"))
	return err != nil || len(m) > 0
}

// gvisorHasState reports whether runsc keeps state for id: it names its
// files <id>_sandbox:<sandbox id>.state under its root.
func (s *Selector) gvisorHasState(id string) bool {
	if validID(id) != nil {
		return false
	}
	m, _ := filepath.Glob(filepath.Join(s.GVisor.Root, id+"_sandbox:*"))
	return len(m) > 0
}

func (s *Selector) Pause(ctx context.Context, id string) error  { return s.Pick(id).Pause(ctx, id) }
func (s *Selector) Resume(ctx context.Context, id string) error { return s.Pick(id).Resume(ctx, id) }

func (s *Selector) State(ctx context.Context, id string) (State, error) {
	return s.Pick(id).State(ctx, id)
}

// List is every container of every runtime.
func (s *Selector) List(ctx context.Context) ([]State, error) {
	var out []State
	err := s.Each(func(r *OCI) error {
		list, err := r.List(ctx)
		out = append(out, list...)
		return err
	})
	return out, err
}

// Verify checks a runc container's posture from the host (VerifyPosture).
// A gVisor container has none to check there: its posture is the
// sentry's, and the host sees only runsc's own processes.
func (s *Selector) Verify(ctx context.Context, id, bundle string) error {
	if s.IsGVisor(id) {
		return nil
	}
	pid, err := s.InitPid(id, bundle)
	if err != nil {
		return fmt.Errorf("verify posture: %w", err)
	}
	return VerifyPosture(pid, bundle)
}

// InitPid reads the pid file the runtime wrote at create, not `runc
// state`: one process spawn less on every start.
func (s *Selector) InitPid(id, bundle string) (int, error) {
	b, err := os.ReadFile(filepath.Join(bundle, PidFile))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("bad pid file %q", b)
	}
	return pid, nil
}

// OOMKilled reports whether id's cgroup saw an OOM kill.
func (s *Selector) OOMKilled(id string) bool {
	ok, _ := OOMKilled(id, s.CgroupsPath(id))
	return ok
}

// CleanupCgroups removes the cgroups, and the gVisor markers, of
// containers not in keep.
func (s *Selector) CleanupCgroups(keep map[string]bool) error {
	s.cleanupMarkers(keep)
	return CleanupCgroups(s.CgroupRoot, keep)
}

func (s *Selector) cleanupMarkers(keep map[string]bool) {
	ents, err := os.ReadDir(s.MarkerDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			_ = os.Remove(s.marker(e.Name()))
		}
	}
}

// WriteBundle chooses id's runtime and writes its bundle in dir: o with
// its cgroupsPath set, and, for a sandbox in a user namespace with a
// netns, a sysfs mounted from inside that netns at dir/sys for the spec
// to bind (see MountSysfs). ReleaseBundle unmounts it.
func (s *Selector) WriteBundle(dir string, gvisor bool, o SpecOptions) error {
	if err := s.Choose(o.ID, gvisor); err != nil {
		return err
	}
	o.SysfsSource = ""
	if o.UserNS != nil && o.NetNSPath != "" {
		o.SysfsSource = filepath.Join(dir, "sys")
		_ = UnmountUnder(o.SysfsSource) // a retried start
		if err := MountSysfs(o.NetNSPath, o.SysfsSource); err != nil {
			return err
		}
	}
	o.CgroupsPath = s.CgroupsPath(o.ID)
	spec, err := Spec(o)
	if err != nil {
		return err
	}
	return WriteBundle(dir, spec)
}

// ReleaseBundle undoes what WriteBundle mounted under dir.
func (s *Selector) ReleaseBundle(dir string) error { return UnmountUnder(dir) }

package server

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control"
	"github.com/berth-sh/berth/internal/errdefs"
)

// fakeBackend keeps sandboxes in a map. Hooks override single methods.
type fakeBackend struct {
	mu    sync.Mutex
	boxes map[string]api.Sandbox
	calls atomic.Int64 // every backend call, to prove rejected requests never reach it

	lastFilter control.ListFilter
	lastCreate api.CreateSandboxRequest

	getErr    error
	execFn    func(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error)
	readFn    func(ctx context.Context, name, path string) (io.ReadCloser, error)
	writeFn   func(ctx context.Context, name, path string, r io.Reader, mode uint32) error
	pullFn    func(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error)
	removedFn func(name, path string, recursive bool)
	fileOpts  agentclient.FileOptions                                                     // of the last ListFiles or Remove
	agentFn   func(ctx context.Context, name string) (*agentclient.Client, func(), error) // devloop_test.go

	snapState // snapshots, fork and backups: fake_snapshot_test.go
}

func newFake() *fakeBackend { return &fakeBackend{boxes: map[string]api.Sandbox{}} }

func (f *fakeBackend) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCreate = req
	if sb, ok := f.boxes[req.Name]; ok {
		if createOnly {
			return api.Sandbox{}, false, errdefs.AlreadyExists("sandbox %q already exists", req.Name)
		}
		return sb, false, nil
	}
	sb := api.Sandbox{Name: req.Name, ID: "id-" + req.Name, State: api.StateRunning, Image: req.Image, Labels: req.Labels, CreatedAt: time.Unix(0, 0).UTC()}
	f.boxes[req.Name] = sb
	return sb, true, nil
}

func (f *fakeBackend) Get(ctx context.Context, name string) (api.Sandbox, error) {
	f.calls.Add(1)
	if f.getErr != nil {
		return api.Sandbox{}, f.getErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.boxes[name]
	if !ok {
		return api.Sandbox{}, errdefs.NotFound("sandbox %q not found", name)
	}
	return sb, nil
}

func (f *fakeBackend) List(ctx context.Context, lf control.ListFilter) ([]api.Sandbox, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastFilter = lf
	var out []api.Sandbox
	for _, sb := range f.boxes {
		out = append(out, sb)
	}
	return out, nil
}

func (f *fakeBackend) Destroy(ctx context.Context, name string) error {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.boxes[name]; !ok {
		return errdefs.NotFound("sandbox %q not found", name)
	}
	delete(f.boxes, name)
	return nil
}

func (f *fakeBackend) Sleep(ctx context.Context, name string) error {
	f.calls.Add(1)
	return nil
}

func (f *fakeBackend) Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	f.calls.Add(1)
	if f.execFn != nil {
		return f.execFn(ctx, name, req, stdout, stderr)
	}
	return api.ExitStatus{}, nil
}

func (f *fakeBackend) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	f.calls.Add(1)
	if f.readFn != nil {
		return f.readFn(ctx, name, path)
	}
	return nil, errdefs.NotFound("%s not found", path)
}

func (f *fakeBackend) WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
	f.calls.Add(1)
	if f.writeFn != nil {
		return f.writeFn(ctx, name, path, r, mode)
	}
	_, err := io.Copy(io.Discard, r)
	return err
}

func (f *fakeBackend) ListFiles(ctx context.Context, name, path string, recursive bool) ([]api.FileInfo, error) {
	f.calls.Add(1)
	f.fileOpts = agentclient.FileOptionsFrom(ctx)
	return []api.FileInfo{{Path: path + "/a", Name: "a", Type: "file"}}, nil
}

func (f *fakeBackend) Stat(ctx context.Context, name, path string) (api.FileInfo, error) {
	f.calls.Add(1)
	return api.FileInfo{Path: path, Type: "file"}, nil
}

func (f *fakeBackend) Mkdir(ctx context.Context, name string, req api.MkdirRequest) error {
	f.calls.Add(1)
	return nil
}

func (f *fakeBackend) Remove(ctx context.Context, name, path string, recursive bool) error {
	f.calls.Add(1)
	f.fileOpts = agentclient.FileOptionsFrom(ctx)
	if f.removedFn != nil {
		f.removedFn(name, path, recursive)
	}
	return nil
}

func (f *fakeBackend) Rename(ctx context.Context, name string, req api.RenameRequest) error {
	f.calls.Add(1)
	return nil
}

func (f *fakeBackend) Exists(ctx context.Context, name, path string) (bool, error) {
	f.calls.Add(1)
	return path == "/yes", nil
}

func (f *fakeBackend) ListImages(ctx context.Context) ([]api.Image, error) {
	f.calls.Add(1)
	return nil, nil
}

func (f *fakeBackend) PullImage(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (api.Image, error) {
	f.calls.Add(1)
	if f.pullFn != nil {
		return f.pullFn(ctx, req, progress)
	}
	return api.Image{Name: req.Name, Ref: req.Ref, Digest: "sha256:00"}, nil
}

func (f *fakeBackend) ImportImage(ctx context.Context, name string, r io.Reader, progress func(api.Progress)) (api.Image, error) {
	f.calls.Add(1)
	n, err := io.Copy(io.Discard, r)
	return api.Image{Name: name, Size: n, Digest: "sha256:11"}, err
}

func (f *fakeBackend) BuildBase(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
	f.calls.Add(1)
	return api.Image{Name: "debian-trixie", Digest: "sha256:22"}, nil
}

func (f *fakeBackend) RemoveImage(ctx context.Context, ref string) error {
	f.calls.Add(1)
	if ref == "missing" {
		return errdefs.NotFound("image %q not found", ref)
	}
	return nil
}

func (f *fakeBackend) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	f.calls.Add(1)
	if f.agentFn != nil {
		return f.agentFn(ctx, name)
	}
	return nil, nil, errdefs.Unavailable("no agents in the fake backend")
}

func (f *fakeBackend) ExposePort(ctx context.Context, name string, req api.ExposePortRequest) (api.ExposedPort, error) {
	return api.ExposedPort{}, errdefs.Unavailable("no previews in the fake backend")
}

func (f *fakeBackend) UnexposePort(ctx context.Context, name string, port int) error {
	return errdefs.Unavailable("no previews in the fake backend")
}

func (f *fakeBackend) ListPorts(ctx context.Context, name string) ([]api.ExposedPort, error) {
	return nil, errdefs.Unavailable("no previews in the fake backend")
}

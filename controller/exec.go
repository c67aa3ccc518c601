package controller

import (
	"context"
	"io"
	"sync"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Exec implements server.Sandboxes. A running exec keeps the sandbox awake.
func (m *Manager) Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	if len(req.Argv) == 0 && req.Command == "" {
		return api.ExitStatus{}, errdefs.InvalidArgument("exec needs argv or command")
	}
	if len(req.Argv) > 0 && req.Command != "" {
		return api.ExitStatus{}, errdefs.InvalidArgument("exec takes argv or command, not both")
	}
	if req.TimeoutMs < 0 {
		return api.ExitStatus{}, errdefs.InvalidArgument("timeoutMs must not be negative")
	}
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return api.ExitStatus{}, err
	}
	defer release()
	return ag.Exec(ctx, req, stdout, stderr)
}

// releaseOnClose keeps the sandbox awake while a download stream is open.
type releaseOnClose struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (r *releaseOnClose) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.release)
	return err
}

// ReadFile implements server.Files.
func (m *Manager) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	if rc, weak, err := m.weakReadFile(ctx, name, path); weak {
		return rc, err
	}
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return nil, err
	}
	rc, err := ag.ReadFile(ctx, path)
	if err != nil {
		release()
		return nil, err
	}
	return &releaseOnClose{ReadCloser: rc, release: release}, nil
}

// WriteFile implements server.Files.
func (m *Manager) WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.WriteFile(ctx, path, r, mode)
}

// ListFiles implements server.Files.
func (m *Manager) ListFiles(ctx context.Context, name, path string, recursive bool) ([]api.FileInfo, error) {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return nil, err
	}
	defer release()
	return ag.ListFiles(ctx, path, recursive)
}

// Stat implements server.Files.
func (m *Manager) Stat(ctx context.Context, name, path string) (api.FileInfo, error) {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer release()
	return ag.Stat(ctx, path)
}

// Mkdir implements server.Files.
func (m *Manager) Mkdir(ctx context.Context, name string, req api.MkdirRequest) error {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.Mkdir(ctx, req)
}

// Remove implements server.Files.
func (m *Manager) Remove(ctx context.Context, name, path string, recursive bool) error {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.Remove(ctx, path, recursive)
}

// Rename implements server.Files.
func (m *Manager) Rename(ctx context.Context, name string, req api.RenameRequest) error {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.Rename(ctx, req)
}

// Exists implements server.Files.
func (m *Manager) Exists(ctx context.Context, name, path string) (bool, error) {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return false, err
	}
	defer release()
	return ag.Exists(ctx, path)
}

// Agent implements server.AgentAccess: the sandbox's agent client, with the
// sandbox held awake until release is called.
func (m *Manager) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	ag, release, err := m.use(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return ag, func() { once.Do(release) }, nil
}

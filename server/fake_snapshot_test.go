package server

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// snapState is the snapshot half of fakeBackend. It records the last
// request each method saw so tests can check what crossed the wire.
type snapState struct {
	snaps   map[string]api.Snapshot
	backups map[string]api.Backup
	nextID  int

	lastSandbox  string // sandbox/source argument of the last call
	lastSnapReq  api.SnapshotRequest
	lastListSnap [2]string // sandbox, name
	lastFork     api.ForkRequest
	lastBackup   api.BackupRequest
	lastRestore  api.RestoreBackupRequest
	lastRestored string // backup id
}

var fakeTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func (f *fakeBackend) newID(prefix string) string {
	f.nextID++
	return fmt.Sprintf("%s_%08x", prefix, f.nextID)
}

func (f *fakeBackend) Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSandbox, f.lastSnapReq = sandbox, req
	if _, ok := f.boxes[sandbox]; !ok {
		return api.Snapshot{}, errdefs.NotFound("sandbox %q not found", sandbox)
	}
	if f.snaps == nil {
		f.snaps = map[string]api.Snapshot{}
	}
	s := api.Snapshot{ID: f.newID("snap"), Name: req.Name, Sandbox: sandbox, SizeBytes: 1234, FreezeMs: 1.5, CreatedAt: fakeTime, ExpiresAt: fakeTime.Add(720 * time.Hour)}
	f.snaps[s.ID] = s
	return s, nil
}

func (f *fakeBackend) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.snaps[id]
	if !ok {
		return api.Snapshot{}, errdefs.NotFound("snapshot %s not found", id)
	}
	return s, nil
}

func (f *fakeBackend) ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastListSnap = [2]string{sandbox, name}
	var out []api.Snapshot
	for _, s := range f.snaps {
		if (sandbox == "" || s.Sandbox == sandbox) && (name == "" || s.Name == name) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *fakeBackend) DeleteSnapshot(ctx context.Context, id string) error {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.snaps[id]; !ok {
		return errdefs.NotFound("snapshot %s not found", id)
	}
	delete(f.snaps, id)
	return nil
}

func (f *fakeBackend) Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSandbox, f.lastFork = source, req
	if _, ok := f.boxes[source]; !ok {
		return api.ForkResult{}, errdefs.NotFound("sandbox %q not found", source)
	}
	res := api.ForkResult{Snapshot: api.Snapshot{ID: f.newID("snap"), Sandbox: source}}
	for i := range req.Count {
		name := fmt.Sprintf("%s-fork-%d", source, i+1)
		if len(req.Names) > 0 {
			name = req.Names[i]
		}
		sb := api.Sandbox{Name: name, State: api.StateRunning, Snapshot: res.Snapshot.ID}
		f.boxes[name] = sb
		res.Sandboxes = append(res.Sandboxes, sb)
	}
	return res, nil
}

func (f *fakeBackend) CreateBackup(ctx context.Context, sandbox string, req api.BackupRequest) (api.Backup, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSandbox, f.lastBackup = sandbox, req
	if f.backups == nil {
		f.backups = map[string]api.Backup{}
	}
	b := api.Backup{ID: f.newID("bak"), Name: req.Name, Sandbox: sandbox, Dir: req.Dir, SizeBytes: 99, Files: 3, CreatedAt: fakeTime, ExpiresAt: fakeTime.Add(72 * time.Hour)}
	f.backups[b.ID] = b
	return b, nil
}

func (f *fakeBackend) ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSandbox = sandbox
	var out []api.Backup
	for _, b := range f.backups {
		if sandbox == "" || b.Sandbox == sandbox {
			out = append(out, b)
		}
	}
	return out, nil
}

func (f *fakeBackend) DeleteBackup(ctx context.Context, id string) error {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.backups[id]; !ok {
		return errdefs.NotFound("backup %s not found", id)
	}
	delete(f.backups, id)
	return nil
}

func (f *fakeBackend) RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastRestored, f.lastRestore = id, req
	b, ok := f.backups[id]
	if !ok {
		return api.RestoreBackupResult{}, errdefs.NotFound("backup %s not found", id)
	}
	dir := req.Dir
	if dir == "" {
		dir = b.Dir
	}
	return api.RestoreBackupResult{Dir: dir, Files: b.Files, Bytes: b.SizeBytes}, nil
}

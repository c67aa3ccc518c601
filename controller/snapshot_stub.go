package controller

import (
	"context"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Temporary until the snapshot controller lands.

func (m *Manager) Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error) {
	return api.Snapshot{}, errdefs.Unavailable("snapshots are not implemented yet")
}
func (m *Manager) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	return api.Snapshot{}, errdefs.Unavailable("snapshots are not implemented yet")
}
func (m *Manager) ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error) {
	return nil, errdefs.Unavailable("snapshots are not implemented yet")
}
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	return errdefs.Unavailable("snapshots are not implemented yet")
}
func (m *Manager) Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error) {
	return api.ForkResult{}, errdefs.Unavailable("fork is not implemented yet")
}
func (m *Manager) CreateBackup(ctx context.Context, sandbox string, req api.BackupRequest) (api.Backup, error) {
	return api.Backup{}, errdefs.Unavailable("backups are not implemented yet")
}
func (m *Manager) ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error) {
	return nil, errdefs.Unavailable("backups are not implemented yet")
}
func (m *Manager) DeleteBackup(ctx context.Context, id string) error {
	return errdefs.Unavailable("backups are not implemented yet")
}
func (m *Manager) RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error) {
	return api.RestoreBackupResult{}, errdefs.Unavailable("backups are not implemented yet")
}

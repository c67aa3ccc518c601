package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
)

// Snapshots, forks and backups. Taking, forking and restoring can take
// seconds (a snapshot of a large workspace is a tar+zstd of its files), so
// those calls ignore the HTTP client's Timeout: a Timeout set for quick
// calls with WithHTTPClient must not cut them off half-way, leaving the
// caller unsure whether the snapshot exists. Bound them with ctx instead.

// long returns a view of c whose HTTP client has no overall timeout. It
// shares the transport, so connections are still reused.
func (c *Client) long() *Client {
	if c.hc.Timeout == 0 {
		return c
	}
	hc := *c.hc
	hc.Timeout = 0
	lc := *c
	lc.hc = &hc
	return &lc
}

func snapshotPath(id string) string { return "/v1/snapshots/" + url.PathEscape(id) }
func backupPath(id string) string   { return "/v1/backups/" + url.PathEscape(id) }

// Snapshot takes a snapshot of a sandbox's files. The sandbox is frozen
// for the moment it takes to capture them (FreezeMs reports how long).
func (c *Client) Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error) {
	var s api.Snapshot
	_, err := c.long().doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "snapshots"), nil, req, &s)
	return s, err
}

// GetSnapshot returns one snapshot by id. An expired or deleted snapshot is
// an errdefs.ErrNotFound error.
func (c *Client) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	var s api.Snapshot
	_, err := c.doJSON(ctx, http.MethodGet, snapshotPath(id), nil, nil, &s)
	return s, err
}

// ListSnapshots lists snapshots, only those of sandbox and only those named
// name when they are not empty.
func (c *Client) ListSnapshots(ctx context.Context, sandbox, name string) ([]api.Snapshot, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	if name != "" {
		q.Set("name", name)
	}
	var list api.SnapshotList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/snapshots", q, nil, &list)
	return list.Snapshots, err
}

// DeleteSnapshot deletes a snapshot. Sandboxes started from it keep
// working.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, snapshotPath(id), nil, nil, nil)
	return err
}

// Fork takes one snapshot of source and starts req.Count new sandboxes
// from it, named req.Names or <source>-fork-<n>.
func (c *Client) Fork(ctx context.Context, source string, req api.ForkRequest) (api.ForkResult, error) {
	var res api.ForkResult
	_, err := c.long().doJSON(ctx, http.MethodPost, sandboxPath(source, "fork"), nil, req, &res)
	return res, err
}

// CreateBackup archives req.Dir of a sandbox into the blob store.
func (c *Client) CreateBackup(ctx context.Context, sandbox string, req api.BackupRequest) (api.Backup, error) {
	var b api.Backup
	_, err := c.long().doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "backups"), nil, req, &b)
	return b, err
}

// ListBackups lists backups, only those taken from sandbox when it is not
// empty.
func (c *Client) ListBackups(ctx context.Context, sandbox string) ([]api.Backup, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	var list api.BackupList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/backups", q, nil, &list)
	return list.Backups, err
}

// DeleteBackup deletes a backup.
func (c *Client) DeleteBackup(ctx context.Context, id string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, backupPath(id), nil, nil, nil)
	return err
}

// RestoreBackup restores a backup into req.Sandbox (any sandbox), at
// req.Dir or where it was taken from. The directory is replaced atomically.
func (c *Client) RestoreBackup(ctx context.Context, id string, req api.RestoreBackupRequest) (api.RestoreBackupResult, error) {
	var res api.RestoreBackupResult
	_, err := c.long().doJSON(ctx, http.MethodPost, backupPath(id)+"/restore", nil, req, &res)
	return res, err
}

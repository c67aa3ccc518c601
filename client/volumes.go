package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
)

func volumePath(name string) string { return "/v1/volumes/" + url.PathEscape(name) }

// CreateVolume makes an empty named volume with a quota of sizeBytes
// (0: the server's default, 1 GiB).
func (c *Client) CreateVolume(ctx context.Context, name string, sizeBytes int64) (api.Volume, error) {
	var v api.Volume
	_, err := c.doJSON(ctx, http.MethodPost, "/v1/volumes", nil, api.CreateVolumeRequest{Name: name, SizeBytes: sizeBytes}, &v)
	return v, err
}

// ListVolumes lists the caller's volumes and snapshots.
func (c *Client) ListVolumes(ctx context.Context) ([]api.Volume, error) {
	var list api.VolumeList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/volumes", nil, nil, &list)
	return list.Volumes, err
}

// GetVolume returns one volume with its usage and holders.
func (c *Client) GetVolume(ctx context.Context, name string) (api.Volume, error) {
	var v api.Volume
	_, err := c.doJSON(ctx, http.MethodGet, volumePath(name), nil, nil, &v)
	return v, err
}

// DeleteVolume deletes a volume and its data; refused while a sandbox
// mounts it.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, volumePath(name), nil, nil, nil)
	return err
}

// SnapshotVolume takes a read-only snapshot of src named name.
func (c *Client) SnapshotVolume(ctx context.Context, src, name string) (api.Volume, error) {
	var v api.Volume
	_, err := c.doJSON(ctx, http.MethodPost, volumePath(src)+"/snapshot", nil, api.VolumeSnapshotRequest{Name: name}, &v)
	return v, err
}

// ForkVolume makes a new writable volume name from src (copy-on-write);
// sizeBytes 0 keeps src's quota.
func (c *Client) ForkVolume(ctx context.Context, src, name string, sizeBytes int64) (api.Volume, error) {
	var v api.Volume
	_, err := c.doJSON(ctx, http.MethodPost, volumePath(src)+"/fork", nil, api.VolumeForkRequest{Name: name, SizeBytes: sizeBytes}, &v)
	return v, err
}

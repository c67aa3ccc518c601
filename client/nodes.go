package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/api"
)

// The cluster's nodes. Only the operator's key may use these; a tenant's
// key gets errdefs.ErrPermissionDenied.

// ListNodes returns every node's entry with its health, and the stale
// bound it was judged by.
func (c *Client) ListNodes(ctx context.Context) (api.NodeList, error) {
	var list api.NodeList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/nodes", nil, nil, &list)
	return list, err
}

// GetNode returns one node; errdefs.ErrNotFound if it never registered.
func (c *Client) GetNode(ctx context.Context, name string) (api.Node, error) {
	var n api.Node
	_, err := c.doJSON(ctx, http.MethodGet, nodePath(name), nil, nil, &n)
	return n, err
}

// DrainNode stops new placements on the node and returns it as it is now.
func (c *Client) DrainNode(ctx context.Context, name string) (api.Node, error) {
	var n api.Node
	_, err := c.doJSON(ctx, http.MethodPost, nodePath(name, "drain"), nil, nil, &n)
	return n, err
}

// UndrainNode lets the node take placements again.
func (c *Client) UndrainNode(ctx context.Context, name string) (api.Node, error) {
	var n api.Node
	_, err := c.doJSON(ctx, http.MethodPost, nodePath(name, "undrain"), nil, nil, &n)
	return n, err
}

func nodePath(name string, rest ...string) string {
	p := "/v1/nodes/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// ListPools returns this node's warm pools (operator key only).
func (c *Client) ListPools(ctx context.Context) (api.PoolList, error) {
	var list api.PoolList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/pools", nil, nil, &list)
	return list, err
}

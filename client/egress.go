package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-sh/berth/api"
)

// GetNetwork returns a sandbox's egress policy.
func (c *Client) GetNetwork(ctx context.Context, sandbox string) (api.NetworkPolicy, error) {
	var p api.NetworkPolicy
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "network"), nil, nil, &p)
	return p, err
}

// SetNetwork replaces a sandbox's egress policy; a running sandbox gets it
// at once.
func (c *Client) SetNetwork(ctx context.Context, sandbox string, p api.NetworkPolicy) (api.NetworkPolicy, error) {
	var out api.NetworkPolicy
	_, err := c.doJSON(ctx, http.MethodPut, sandboxPath(sandbox, "network"), nil, p, &out)
	return out, err
}

// EgressLog returns a sandbox's last limit egress decisions (0: all kept).
func (c *Client) EgressLog(ctx context.Context, sandbox string, limit int) ([]api.EgressEvent, error) {
	var l api.EgressLog
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "egress", "log"), q, nil, &l)
	return l.Events, err
}

// SetSecret stores a secret for credential injection. It cannot be read
// back.
func (c *Client) SetSecret(ctx context.Context, name, value string) error {
	_, err := c.doJSON(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), nil, api.SetSecretRequest{Value: value}, nil)
	return err
}

// ListSecrets lists secret names and update times.
func (c *Client) ListSecrets(ctx context.Context) ([]api.Secret, error) {
	var l api.SecretList
	_, err := c.doJSON(ctx, http.MethodGet, "/v1/secrets", nil, nil, &l)
	return l.Secrets, err
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	_, err := c.doJSON(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil, nil)
	return err
}

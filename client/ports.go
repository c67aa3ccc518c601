package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/api"
)

// ExposePort makes a preview URL for a port of the sandbox. Exposing a port
// again issues a new token, and the old URL stops working, unless
// req.Token names the token (8 to 32 characters from [a-z0-9]): the same
// token gives the same URL again, also in a later run.
func (c *Client) ExposePort(ctx context.Context, sandbox string, req api.ExposePortRequest) (api.ExposedPort, error) {
	var p api.ExposedPort
	_, err := c.doJSON(ctx, http.MethodPost, sandboxPath(sandbox, "ports"), nil, req, &p)
	return p, err
}

// UnexposePort ends access to a port's preview URL.
func (c *Client) UnexposePort(ctx context.Context, sandbox string, port int) error {
	_, err := c.doJSON(ctx, http.MethodDelete, sandboxPath(sandbox, "ports", strconv.Itoa(port)), nil, nil, nil)
	return err
}

// ListPorts lists a sandbox's exposed ports.
func (c *Client) ListPorts(ctx context.Context, sandbox string) ([]api.ExposedPort, error) {
	var l api.ExposedPortList
	_, err := c.doJSON(ctx, http.MethodGet, sandboxPath(sandbox, "ports"), nil, nil, &l)
	return l.Ports, err
}

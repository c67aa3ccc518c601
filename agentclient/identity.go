package agentclient

import (
	"context"
	"net/http"

	"github.com/berth-sh/berth/agent/wire"
)

// BindIdentity binds the environment that a warm-pool member's agent
// starts every later exec from (POST /v1/identity). The agent accepts it
// once; a second bind, or one to an agent not started as a pool member,
// is errdefs.ErrFailedPrecondition.
func (c *Client) BindIdentity(ctx context.Context, env []string) error {
	return c.call(ctx, http.MethodPost, "/v1/identity", nil, wire.IdentityRequest{Env: env}, nil, 0)
}

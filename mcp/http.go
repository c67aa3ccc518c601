package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// apiKeyExtra is where the verified bearer token keeps the caller's berth
// API key inside auth.TokenInfo (in this process only; it is never sent).
const apiKeyExtra = "berthAPIKey"

// Bearer serves each call with a client for baseURL that authenticates
// with the API key the MCP client presented as its bearer token (see
// HTTPHandler). The MCP server holds no key of its own: berth checks the
// caller's key on every call and scopes it to the caller's tenant.
func Bearer(baseURL string, opts ...client.Option) Clients {
	return func(_ context.Context, req *sdk.CallToolRequest) (*client.Client, error) {
		var key string
		if req != nil && req.Extra != nil && req.Extra.TokenInfo != nil {
			key, _ = req.Extra.TokenInfo.Extra[apiKeyExtra].(string)
		}
		if key == "" {
			return nil, errdefs.Unauthenticated("no API key: send your berth API key as \"Authorization: Bearer <key>\"")
		}
		return client.New(baseURL, key, opts...), nil
	}
}

// verifyBearer accepts any non-empty bearer token as a berth API key to
// pass on: berth itself decides whether it is valid, on every tool call.
// The session is bound to the key (UserID is its hash), so a request that
// carries another key cannot use a session it did not open.
func verifyBearer(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if token == "" {
		return nil, auth.ErrInvalidToken
	}
	sum := sha256.Sum256([]byte(token))
	return &auth.TokenInfo{
		UserID: hex.EncodeToString(sum[:]),
		Extra:  map[string]any{apiKeyExtra: token},
	}, nil
}

// HTTPHandler serves the MCP streamable HTTP transport for berth at
// baseURL. Every request must carry "Authorization: Bearer <berth API
// key>" (401 otherwise); tool calls use that key (Bearer). The SDK's DNS
// rebinding protection stays on: a request to a loopback listener must
// name a loopback Host.
func HTTPHandler(baseURL string, opts ...client.Option) http.Handler {
	s := NewServer(Bearer(baseURL, opts...))
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	return auth.RequireBearerToken(verifyBearer, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

package agentclient

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// GitCheckout clones a repository inside the sandbox as the default user
// (git clone, GIT_TERMINAL_PROMPT=0). Errors are typed: NotFound for a
// missing repository or branch ("branch ... not found"), Unauthenticated or
// PermissionDenied for auth failures, Unavailable for network errors,
// InvalidArgument for a URL that is not https/http/git/ssh/file or
// user@host:path (or that starts with '-'), AlreadyExists for a non-empty
// target, DeadlineExceeded on timeout.
func (c *Client) GitCheckout(ctx context.Context, req api.GitCheckoutRequest) (api.GitCheckoutResult, error) {
	if strings.HasPrefix(req.URL, "-") || !utf8.ValidString(req.URL) || !utf8.ValidString(req.Branch) {
		return api.GitCheckoutResult{}, errdefs.InvalidArgument("invalid git URL or branch")
	}
	if req.TargetDir != "" {
		if err := checkPath(req.TargetDir); err != nil {
			return api.GitCheckoutResult{}, err
		}
	}
	res, err := longCall[api.GitCheckoutResult](ctx, c, "/v1/git/checkout", req)
	if err != nil {
		return api.GitCheckoutResult{}, err
	}
	return *res, nil
}

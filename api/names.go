package api

import (
	"regexp"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Sandbox names become host names and parts of preview URLs, so they are
// DNS labels. This is the one rule; the server, the controller and the
// preview proxy all use it.
var sandboxNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateSandboxName returns an invalid-argument error unless name is a
// valid sandbox name.
func ValidateSandboxName(name string) error {
	if !sandboxNameRE.MatchString(name) {
		return errdefs.InvalidArgument("invalid sandbox name %q: use 1-63 characters of a-z, 0-9 and '-', starting with a letter or digit", name)
	}
	return nil
}

package agentclient

import (
	"strings"
	"unicode/utf8"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// checkPath refuses, before anything is sent, a path the agent would refuse
// or that JSON would silently alter (encoding/json replaces invalid UTF-8
// with U+FFFD, which names a different file).
func checkPath(p string) error {
	switch {
	case p == "":
		return errdefs.InvalidArgument("path is empty")
	case len(p) > 4096:
		return errdefs.InvalidArgument("path is longer than 4096 bytes")
	case strings.IndexByte(p, 0) >= 0:
		return errdefs.InvalidArgument("path contains a NUL byte")
	case !utf8.ValidString(p):
		return errdefs.InvalidArgument("path is not valid UTF-8")
	}
	return nil
}

// checkExec refuses text JSON cannot carry unchanged.
func checkExec(req *api.ExecRequest) error {
	bad := func(what, s string) error {
		if !utf8.ValidString(s) {
			return errdefs.InvalidArgument("exec %s is not valid UTF-8", what)
		}
		return nil
	}
	for _, a := range req.Argv {
		if err := bad("argv", a); err != nil {
			return err
		}
	}
	for k, v := range req.Env {
		if v == api.EnvUnset {
			v = "" // null: unset
		}
		if err := bad("env", k+v); err != nil {
			return err
		}
	}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			return err
		}
	}
	if err := bad("command", req.Command); err != nil {
		return err
	}
	return bad("user", req.User)
}

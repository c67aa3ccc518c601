package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/control/forward"
	"github.com/berth-sh/berth/durable"
)

// Routes the router places rather than follows: a create names a sandbox
// that has no owner yet. A restore names its sandbox in the body, not the
// path: it is the sandbox's owner's to run (it writes into the sandbox).
const (
	createPattern      = "POST /v1/sandboxes"
	getOrCreatePattern = "PUT /v1/sandboxes/{name}"
	objectCallPattern  = "POST /v1/objects/{class}/{id}/{method}"
	restorePattern     = "POST /v1/backups/{id}/restore"
)

// forward asks the router where a request goes, after authentication and
// before the route's idempotency journal (the owner journals a forwarded
// call; journaling it here too would record it twice). It reports whether
// the request was answered: proxied to its owner or refused with an error.
// Routes without a sandbox (the inventory, images, snapshot and backup
// records) are served here from the shared store; every route that acts
// on a sandbox, by its path ({name}, a sandbox object's id) or its body (a
// restore), goes to the sandbox's owner.
func (s *server) forward(w http.ResponseWriter, r *http.Request, pattern string) bool {
	rt := forward.Route{Face: forward.API}
	var out forward.Outcome
	var err error
	switch name := r.PathValue("name"); {
	case pattern == objectCallPattern:
		class, id := r.PathValue("class"), r.PathValue("id")
		if class == durable.BuiltinSandboxClass {
			// A sandbox's controller object lives where the sandbox does.
			if ValidateSandboxName(id) != nil {
				return false
			}
			out, err = s.opts.Forward.Sandbox(w, r, id, rt)
			if out == forward.Missing {
				out = forward.Local // the route answers "no such sandbox"
			}
		} else {
			out, err = s.opts.Forward.Object(w, r, class, id, rt)
		}
	case pattern == createPattern:
		req, ok := s.peekCreate(r, "")
		if !ok {
			return false // the route answers the bad body
		}
		out, err = s.opts.Forward.Create(w, r, req, rt)
	case pattern == restorePattern:
		target, ok := s.peekRestore(r)
		if !ok {
			return false // the route answers the bad body
		}
		out, err = s.opts.Forward.Sandbox(w, r, target, rt)
		if out == forward.Missing {
			out = forward.Local // the route answers "no such sandbox"
		}
	case name != "":
		if ValidateSandboxName(name) != nil {
			return false // the route answers 400
		}
		out, err = s.opts.Forward.Sandbox(w, r, name, rt)
		if err == nil && out == forward.Missing && pattern == getOrCreatePattern {
			if req, ok := s.peekCreate(r, name); ok {
				out, err = s.opts.Forward.Create(w, r, req, rt)
			}
		}
	default:
		return false
	}
	if err != nil {
		writeError(w, err)
		return true
	}
	return out == forward.Proxied
}

// peekCreate parses a create body for placement and leaves r.Body to be
// read again from its start (by the route, or by the forward). A body that
// does not parse is left to the route, which answers it as it always does.
func (s *server) peekCreate(r *http.Request, name string) (api.CreateSandboxRequest, bool) {
	if r.Body == nil {
		return api.CreateSandboxRequest{}, false
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	r.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(data), r.Body), Closer: r.Body}
	if err != nil || int64(len(data)) > s.opts.MaxBodyBytes {
		return api.CreateSandboxRequest{}, false
	}
	req, err := parseCreate(bytes.NewReader(data), name, name != "")
	return req, err == nil
}

// peekRestore is the sandbox a restore writes into, read from its body
// like peekCreate (r.Body left readable from the start); false when the
// body does not parse or names no valid sandbox.
func (s *server) peekRestore(r *http.Request) (string, bool) {
	if r.Body == nil {
		return "", false
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	r.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(data), r.Body), Closer: r.Body}
	if err != nil || int64(len(data)) > s.opts.MaxBodyBytes {
		return "", false
	}
	var req api.RestoreBackupRequest
	if json.Unmarshal(data, &req) != nil || ValidateSandboxName(req.Sandbox) != nil {
		return "", false
	}
	return req.Sandbox, true
}

// replayBody is a request body whose first bytes were read ahead.
type replayBody struct {
	io.Reader
	io.Closer
}

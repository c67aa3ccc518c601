package agent

import (
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Late-bound identity. A warm-pool member's agent starts before anyone
// knows which sandbox it will be; when the host claims it, it binds the
// environment of the sandbox's later execs with one POST /v1/identity
// (the hostname and /etc files are set from the host side). The call is
// accepted once, and only by an agent started as a pool member
// (Config.AwaitIdentity): the host makes it before the sandbox is handed
// out, so nothing inside can make it first, and nothing can rebind it
// afterwards.

// identity holds the environment execs start from.
type identity struct {
	mu    sync.RWMutex
	env   []string
	await bool // a bind is still accepted
}

func (id *identity) baseEnv() []string {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.env
}

func (s *Server) handleIdentity(w http.ResponseWriter, r *http.Request) {
	var req wire.IdentityRequest
	if err := httpio.DecodeJSON(w, r, httpio.MaxSmallBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	for _, kv := range req.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			httpio.WriteError(w, errdefs.InvalidArgument("invalid environment entry %q", kv))
			return
		}
	}
	s.id.mu.Lock()
	if !s.id.await {
		s.id.mu.Unlock()
		httpio.WriteError(w, errdefs.FailedPrecondition("this agent's identity is bound"))
		return
	}
	s.id.await = false
	s.id.env = append([]string(nil), req.Env...)
	if s.cfg.SetProcessEnv {
		// The agent's own environment follows (its program lookups
		// use PATH), as if it had been started with it.
		os.Clearenv()
		for _, kv := range req.Env {
			k, v, _ := strings.Cut(kv, "=")
			_ = os.Setenv(k, v)
		}
	}
	s.id.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

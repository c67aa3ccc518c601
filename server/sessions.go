package server

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// sessionExecResult is the buffered answer of a session exec: an
// ExecResult plus what happened to the session's shell.
type sessionExecResult struct {
	api.ExecResult
	ShellExited bool   `json:"shellExited,omitempty"`
	Restarted   bool   `json:"restarted,omitempty"`
	Notice      string `json:"notice,omitempty"`
}

// sessionExecEvent is an ExecEvent whose exit carries the session fields;
// a client that knows only ExecEvent reads it unchanged.
type sessionExecEvent struct {
	Type  string                 `json:"type"`
	Exit  *api.SessionExitStatus `json:"exit,omitempty"`
	Error *api.Error             `json:"error,omitempty"`
}

func (s *server) createSession(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.CreateSessionRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return err
	}
	if err := validateCreateSession(&req); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		info, err := ag.CreateSession(r.Context(), req)
		if err != nil {
			return err
		}
		w.Header().Set("Location", "/v1/sandboxes/"+url.PathEscape(name)+"/sessions/"+url.PathEscape(info.ID))
		writeJSON(w, http.StatusCreated, info)
		return nil
	})
}

func (s *server) listSessions(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		list, err := ag.ListSessions(r.Context())
		if err != nil {
			return err
		}
		if list == nil {
			list = []api.SessionInfo{}
		}
		writeJSON(w, http.StatusOK, api.SessionList{Sessions: list})
		return nil
	})
}

// withSession runs fn for the session named in the path.
func (s *server) withSession(r *http.Request, fn func(ag *agentclient.Client, id string) error) error {
	return s.withAgentObject(r, "session", fn)
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) error {
	return s.withSession(r, func(ag *agentclient.Client, id string) error {
		info, err := ag.GetSession(r.Context(), id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

// updateSession sets and unsets variables in a live session and changes
// its default command timeout.
func (s *server) updateSession(w http.ResponseWriter, r *http.Request) error {
	var req api.UpdateSessionRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateUpdateSession(&req); err != nil {
		return err
	}
	return s.withSession(r, func(ag *agentclient.Client, id string) error {
		info, err := ag.UpdateSession(r.Context(), id, req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	grace, err := queryGrace(r)
	if err != nil {
		return err
	}
	return s.withSession(r, func(ag *agentclient.Client, id string) error {
		if err := ag.DeleteSession(r.Context(), id, grace); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// sessionExec runs a command in a session's shell, buffered or as SSE
// exactly like sandbox exec.
func (s *server) sessionExec(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateExec(&req); err != nil {
		return err
	}
	return s.withSession(r, func(ag *agentclient.Client, id string) error {
		if wantsEventStream(r) {
			return s.sessionExecStream(w, r, ag, id, req)
		}
		stdout := &capBuffer{max: s.opts.MaxBufferedOutput}
		stderr := &capBuffer{max: s.opts.MaxBufferedOutput}
		st, err := ag.SessionExec(r.Context(), id, req, stdout, stderr)
		if err != nil {
			return err
		}
		res := sessionExecResult{
			ExecResult:  api.ExecResult{ExitStatus: st.ExitStatus},
			ShellExited: st.ShellExited, Restarted: st.Restarted, Notice: st.Notice,
		}
		var errTrunc bool
		res.Stdout, res.Truncated = stdout.result()
		res.Stderr, errTrunc = stderr.result()
		res.Truncated = res.Truncated || errTrunc
		writeJSON(w, http.StatusOK, res)
		return nil
	})
}

func (s *server) sessionExecStream(w http.ResponseWriter, r *http.Request, ag *agentclient.Client, id string, req api.ExecRequest) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := newSSEStream(w, cancel)
	stop := st.keepAlive(s.pingInterval)
	status, err := ag.SessionExec(ctx, id, req, &sseOutput{s: st, typ: "stdout"}, &sseOutput{s: st, typ: "stderr"})
	stop()
	if err != nil {
		if st.closeIfUnstarted() {
			return err
		}
		e := errorBody(w, err)
		_ = st.finish("error", sessionExecEvent{Type: "error", Error: &e})
		return nil
	}
	_ = st.finish("exit", sessionExecEvent{Type: "exit", Exit: &status})
	return nil
}

func (s *server) gitCheckout(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.GitCheckoutRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateGitCheckout(&req); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		res, err := ag.GitCheckout(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	})
}

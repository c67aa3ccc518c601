package server

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Code contexts: persistent interpreters inside a sandbox, served by its
// agent (agent/interp.go). These handlers validate, wake the sandbox and
// relay; a run streams as SSE (one event per api.CodeEvent, named by its
// type) or is buffered into an api.CodeRunResult.

const maxCodeBytes = 16 << 20

func validateLanguage(l string) error {
	switch l {
	case "", "python", "javascript", "typescript", "python3", "py", "js", "node", "ts", "bash", "sh", "shell":
		return nil
	case "r", "java", "R", "Java":
		return nil // the agent says why it cannot run them
	}
	return errdefs.InvalidArgument("unsupported language %q (python, javascript, typescript or bash)", l)
}

func (s *server) createCodeContext(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.CreateCodeContextRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return err
	}
	if err := validateLanguage(req.Language); err != nil {
		return err
	}
	if err := validateEnv("env", req.Env); err != nil {
		return err
	}
	if req.Cwd != "" {
		if err := validatePath("cwd", req.Cwd); err != nil {
			return err
		}
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		info, err := ag.CreateCodeContext(r.Context(), req)
		if err != nil {
			return err
		}
		w.Header().Set("Location", "/v1/sandboxes/"+url.PathEscape(name)+"/code/contexts/"+url.PathEscape(info.ID))
		writeJSON(w, http.StatusCreated, info)
		return nil
	})
}

func (s *server) listCodeContexts(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		list, err := ag.ListCodeContexts(r.Context())
		if err != nil {
			return err
		}
		if list == nil {
			list = []api.CodeContext{}
		}
		writeJSON(w, http.StatusOK, api.CodeContextList{Contexts: list})
		return nil
	})
}

func (s *server) withCodeContext(r *http.Request, fn func(ag *agentclient.Client, id string) error) error {
	return s.withAgentObject(r, "code context", fn)
}

func (s *server) deleteCodeContext(w http.ResponseWriter, r *http.Request) error {
	return s.withCodeContext(r, func(ag *agentclient.Client, id string) error {
		if err := ag.DeleteCodeContext(r.Context(), id); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *server) restartCodeContext(w http.ResponseWriter, r *http.Request) error {
	return s.withCodeContext(r, func(ag *agentclient.Client, id string) error {
		info, err := ag.RestartCodeContext(r.Context(), id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

func validateRunCode(req *api.RunCodeRequest) error {
	if len(req.Code) > maxCodeBytes {
		return errdefs.InvalidArgument("code exceeds %d bytes", maxCodeBytes)
	}
	if req.Context != "" {
		if err := validateDevID("code context", req.Context); err != nil {
			return err
		}
		if req.Language != "" {
			return errdefs.InvalidArgument("set context or language, not both")
		}
	}
	if err := validateLanguage(req.Language); err != nil {
		return err
	}
	if err := validateTimeoutMs("timeoutMs", req.TimeoutMs); err != nil {
		return err
	}
	return validateEnv("env", req.Env)
}

// runCode runs code in a context. Cancelling the request (the client goes
// away) interrupts the code in the sandbox.
func (s *server) runCode(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.RunCodeRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateRunCode(&req); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		if !wantsEventStream(r) {
			res, err := ag.RunCode(r.Context(), req, nil)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, res)
			return nil
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		st := newSSEStream(w, cancel)
		stop := st.keepAlive(s.pingInterval)
		var complete *api.CodeEvent
		// The headers go out once the agent took the run, so a cell
		// that prints nothing has a started stream.
		_, err = ag.RunCodeStarted(ctx, req, st.ping, func(ev api.CodeEvent) {
			if ev.Type == api.CodeEventComplete {
				complete = &ev // sent by finish below, as the terminal event
				return
			}
			_ = st.event(ev.Type, ev)
		})
		stop()
		if err != nil {
			if st.closeIfUnstarted() {
				return err
			}
			// "failure", not "error": an error event is the code's own
			// exception and the run goes on; a failure ends the stream.
			if r.Context().Err() == nil {
				err = s.codeRunCut(name, err)
			}
			e := errorBody(w, err)
			_ = st.finish(codeFailureEvent, codeFailure{Type: codeFailureEvent, Failure: &e})
			return nil
		}
		_ = st.finish(api.CodeEventComplete, complete)
		return nil
	})
}

// codeFailureEvent ends a run stream that could not complete (the sandbox
// or its agent failed).
const codeFailureEvent = "failure"

type codeFailure struct {
	Type    string     `json:"type"`
	Failure *api.Error `json:"failure"`
}

// codeRunCut names the cause of a run cut short when it is that its
// sandbox was destroyed or stopped meanwhile, not the agent's torn stream.
func (s *server) codeRunCut(name string, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sb, gerr := s.b.Get(ctx, name)
	switch {
	case errdefs.IsKind(gerr, errdefs.ErrNotFound):
		return errdefs.Unavailable("sandbox %q was destroyed while the code ran", name)
	case gerr == nil && sb.State != api.StateRunning:
		return errdefs.Unavailable("sandbox %q stopped (%s) while the code ran; its interpreter state is gone", name, sb.State)
	}
	return err
}

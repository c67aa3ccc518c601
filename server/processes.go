package server

import (
	"context"
	"net/http"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
)

// agent wakes the named sandbox and returns its agent client. release is
// never nil; call it when the request (or its stream) ends, so that the
// sandbox may sleep again.
func (s *server) agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	ag, release, err := s.b.Agent(ctx, name)
	if release == nil {
		release = func() {}
	}
	if err != nil {
		release()
		return nil, func() {}, err
	}
	return ag, release, nil
}

func (s *server) startProcess(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var req api.StartProcessRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateStartProcess(&req); err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		info, err := ag.StartProcess(r.Context(), req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, info)
		return nil
	})
}

func (s *server) listProcesses(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	sid := r.URL.Query().Get("sessionId")
	if sid != "" {
		if err := validateDevID("session", sid); err != nil {
			return err
		}
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		list, err := ag.ListProcesses(r.Context(), sid)
		if err != nil {
			return err
		}
		if list == nil {
			list = []api.ProcessInfo{}
		}
		writeJSON(w, http.StatusOK, api.ProcessList{Processes: list})
		return nil
	})
}

// withProcess runs fn for the process named in the path.
func (s *server) withProcess(r *http.Request, fn func(ag *agentclient.Client, id string) error) error {
	return s.withAgentObject(r, "process", fn)
}

// withAgent wakes the named sandbox (already validated), runs fn with its
// agent, and releases the sandbox when fn returns (for a stream: when the
// stream ends).
func (s *server) withAgent(ctx context.Context, name string, fn func(ag *agentclient.Client) error) error {
	ag, release, err := s.agent(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return fn(ag)
}

// withAgentObject is the shape shared by routes on one dev-loop object
// (process, session, code context): validate the sandbox name and the
// object's {id} (kind names it in errors), wake the sandbox, run fn, and
// release the sandbox when fn returns.
func (s *server) withAgentObject(r *http.Request, kind string, fn func(ag *agentclient.Client, id string) error) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	id, err := pathDevID(r, kind)
	if err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		return fn(ag, id)
	})
}

func (s *server) getProcess(w http.ResponseWriter, r *http.Request) error {
	return s.withProcess(r, func(ag *agentclient.Client, id string) error {
		info, err := ag.GetProcess(r.Context(), id)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

func (s *server) killProcess(w http.ResponseWriter, r *http.Request) error {
	sig, err := querySignal(r)
	if err != nil {
		return err
	}
	grace, err := queryGrace(r)
	if err != nil {
		return err
	}
	return s.withProcess(r, func(ag *agentclient.Client, id string) error {
		info, err := ag.KillProcess(r.Context(), id, agentclient.KillOptions{Signal: sig, Grace: grace})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

func (s *server) killAllProcesses(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	grace, err := queryGrace(r)
	if err != nil {
		return err
	}
	return s.withAgent(r.Context(), name, func(ag *agentclient.Client) error {
		n, err := ag.KillAllProcesses(r.Context(), agentclient.KillOptions{Grace: grace})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.KillAllResult{Killed: n})
		return nil
	})
}

// processLogs answers with the buffered logs as JSON, or, with
// Accept: text/event-stream or ?follow=1, streams them as server-sent
// events: the buffered output, then live output, then exactly one exit or
// error event (as for exec). A stream whose agent dies or stalls ends with
// an error event, never with an exit status the process did not have.
func (s *server) processLogs(w http.ResponseWriter, r *http.Request) error {
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	return s.withProcess(r, func(ag *agentclient.Client, id string) error {
		if !follow && !wantsEventStream(r) {
			logs, err := ag.ProcessLogs(r.Context(), id)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, logs)
			return nil
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		st := newSSEStream(w, cancel) // a client that went away ends the stream
		stop := st.keepAlive(s.pingInterval)
		status, err := ag.StreamProcessLogs(ctx, id, &sseOutput{s: st, typ: "stdout"}, &sseOutput{s: st, typ: "stderr"})
		stop()
		if err != nil {
			if st.closeIfUnstarted() {
				return err
			}
			e := errorBody(w, err)
			_ = st.finish("error", api.ExecEvent{Type: "error", Error: &e})
			return nil
		}
		_ = st.finish("exit", api.ExecEvent{Type: "exit", Exit: &status})
		return nil
	})
}

// The wait routes block until the condition holds. The agent's errors keep
// their kinds: a process that exits before it is ready is
// FailedPrecondition (409), a timeout DeadlineExceeded (504).

func (s *server) waitLog(w http.ResponseWriter, r *http.Request) error {
	var req api.WaitLogRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateWaitLog(&req); err != nil {
		return err
	}
	return s.withProcess(r, func(ag *agentclient.Client, id string) error {
		res, err := ag.WaitForLog(r.Context(), id, req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	})
}

func (s *server) waitPort(w http.ResponseWriter, r *http.Request) error {
	var req api.WaitPortRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	if err := validateWaitPort(&req); err != nil {
		return err
	}
	return s.withProcess(r, func(ag *agentclient.Client, id string) error {
		res, err := ag.WaitForPort(r.Context(), id, req)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	})
}

func (s *server) waitExit(w http.ResponseWriter, r *http.Request) error {
	var req api.WaitExitRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return err
	}
	if err := validateTimeoutMs("timeoutMs", req.TimeoutMs); err != nil {
		return err
	}
	return s.withProcess(r, func(ag *agentclient.Client, id string) error {
		info, err := ag.WaitForExit(r.Context(), id, time.Duration(req.TimeoutMs)*time.Millisecond)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

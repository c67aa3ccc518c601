package interp

import (
	"fmt"
	"net/http"
	"time"

	"github.com/berth-sh/berth/agent/internal/child"
	"github.com/berth-sh/berth/agent/internal/httpio"
	"github.com/berth-sh/berth/agent/wire"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// syncWait bounds the wait for a kernel's sync marks after its complete
// event.
const syncWait = time.Second

// codeRequest is what the agent sends a kernel.
type codeRequest struct {
	Code string  `json:"code"`
	Env  api.Env `json:"env,omitempty"` // null (api.EnvUnset) unsets for the run
}

// heartbeat keeps an idle run stream alive for agentclient's stall timer.
var heartbeat = struct {
	Type string `json:"type"`
}{"heartbeat"}

// HandleRun serves its route (see New).
func (m *Contexts) HandleRun(w http.ResponseWriter, r *http.Request) {
	var req api.RunCodeRequest
	if err := httpio.DecodeJSON(w, r, maxCodeBody, &req); err != nil {
		httpio.WriteError(w, err)
		return
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > child.MaxTimeoutMs {
		httpio.WriteError(w, errdefs.InvalidArgument("timeoutMs %d out of range", req.TimeoutMs))
		return
	}
	var c *codeContext
	var err error
	if req.Context != "" {
		c, err = m.get(req.Context)
	} else {
		c, err = m.defaultFor(req.Language)
	}
	if err != nil {
		httpio.WriteError(w, err)
		return
	}
	code := req.Code
	var tsErr *api.CodeError
	if c.language == api.LangTypeScript {
		code, tsErr = transpileTS(code)
	}

	startStream := func() *eventWriter {
		w.Header().Set("Content-Type", wire.CodeContentType)
		w.WriteHeader(http.StatusOK)
		ew := &eventWriter{w: w, rc: http.NewResponseController(w)}
		ew.rc.Flush()
		return ew
	}
	fail := func(ew *eventWriter, name, value string) {
		ew.write(api.CodeEvent{Type: api.CodeEventError, Error: &api.CodeError{Name: name, Value: value, Traceback: name + ": " + value}})
		ew.write(api.CodeEvent{Type: api.CodeEventComplete, Context: c.id})
	}

	// Serialize runs of one context. A free context answers errors of its
	// interpreter's start with a status; a busy one answers at once (the
	// headers go out, then heartbeats) and waits for its turn, giving up if
	// the client leaves first.
	var ew *eventWriter
	if !c.run.TryLock() {
		ew = startStream()
		locked := make(chan struct{})
		go func() {
			c.run.Lock()
			close(locked)
		}()
		hb := time.NewTicker(m.cfg.Heartbeat)
		defer hb.Stop()
	wait:
		for {
			select {
			case <-locked:
				break wait
			case <-hb.C:
				ew.write(heartbeat)
			case <-r.Context().Done():
				go func() { <-locked; c.run.Unlock() }()
				return
			}
		}
	}
	defer c.run.Unlock()
	if err := m.ensureKernel(c, false); err != nil {
		if ew == nil {
			httpio.WriteError(w, err)
			return
		}
		fail(ew, "InterpreterStartError", err.Error())
		return
	}
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()

	if ew == nil {
		ew = startStream()
	}
	if tsErr != nil {
		ew.write(api.CodeEvent{Type: api.CodeEventError, Error: tsErr})
		ew.write(api.CodeEvent{Type: api.CodeEventComplete, Context: c.id})
		return
	}
	if k.bash {
		if key, ok := validBashEnv(req.Env); !ok {
			fail(ew, "InvalidArgument", fmt.Sprintf("environment variable %q is not a valid bash variable name", key))
			return
		}
	}
	m.runOn(r, ew, c, k, codeRequest{Code: code, Env: req.Env}, time.Duration(req.TimeoutMs)*time.Millisecond)
}

// runOn sends one request to k and forwards its events until complete.
// Events left over from earlier (output of background threads between
// runs) are dropped first.
func (m *Contexts) runOn(r *http.Request, ew *eventWriter, c *codeContext, k *kernel, req codeRequest, timeout time.Duration) {
drain:
	for {
		select {
		case _, ok := <-k.events:
			if !ok {
				break drain
			}
		default:
			break drain
		}
	}
	fail := func(name, value string) {
		ew.write(api.CodeEvent{Type: api.CodeEventError, Error: &api.CodeError{Name: name, Value: value, Traceback: name + ": " + value}})
		ew.write(api.CodeEvent{Type: api.CodeEventComplete, Context: c.id})
	}
	if err := k.send(req); err != nil {
		fail("InterpreterExited", fmt.Sprintf("the %s interpreter is not running (%s); run again to start a fresh one, its state is lost", c.language, k.describeExit()))
		return
	}
	var timeoutC, graceC <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	done := r.Context().Done()
	interrupted, settling := false, false
	startGrace := func() {
		if interrupted {
			return
		}
		interrupted = true
		k.interrupt()
		g := time.NewTimer(interruptGrace)
		graceC = g.C
		// g is not stopped: it fires once at most and is then garbage.
	}
	// complete is held back until the sync marks of both output pipes
	// arrived (or syncWait passed: the code may have closed fd 1).
	var complete *kernelEvent
	synced := 0
	var syncC <-chan time.Time
	hb := time.NewTicker(m.cfg.Heartbeat)
	defer hb.Stop()
	events := k.events
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				<-k.exited
				fail("InterpreterExited", fmt.Sprintf("the %s interpreter exited during the run (%s); its state is lost and the next run starts a fresh interpreter", c.language, k.describeExit()))
				return
			}
			if ev.Type == "ready" {
				continue
			}
			if ev.Type == syncEvent {
				synced++
			} else if ev.Type == api.CodeEventComplete {
				ev.Context = c.id
				complete = &ev
				t := time.NewTimer(syncWait)
				defer t.Stop()
				syncC = t.C
			} else {
				ew.write(ev.CodeEvent)
				if interrupted && ev.Type == api.CodeEventError && !settling {
					// The code stopped (it reported the interrupt): the
					// interpreter is alive and only has to finish the
					// run, which a loaded machine may take longer than
					// interruptGrace to do. Killing it now would lose
					// the state the interrupt kept.
					settling = true
					g := time.NewTimer(interruptSettle)
					graceC = g.C
				}
			}
			if complete != nil && synced >= 2 {
				ew.write(complete.CodeEvent)
				return
			}
		case <-syncC:
			ew.write(complete.CodeEvent)
			return
		case <-timeoutC:
			timeoutC = nil
			startGrace()
		case <-done:
			done = nil
			ew.dead = true
			startGrace()
		case <-graceC:
			c.stop()
			why := fmt.Sprintf("the code did not stop within %s of the interrupt", interruptGrace)
			if settling {
				why = fmt.Sprintf("the run did not end within %s after the code stopped at the interrupt", interruptSettle)
			}
			fail("InterpreterKilled", fmt.Sprintf("%s, so the %s interpreter was killed; its state is lost and the next run starts a fresh interpreter", why, c.language))
			return
		case <-hb.C:
			ew.write(heartbeat)
		}
	}
}

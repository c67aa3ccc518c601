package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// syncWait bounds the wait for a kernel's sync marks after its complete
// event.
const syncWait = time.Second

// codeRequest is what the agent sends a kernel.
type codeRequest struct {
	Code string            `json:"code"`
	Env  map[string]string `json:"env,omitempty"`
}

// heartbeat keeps an idle run stream alive for agentclient's stall timer.
var heartbeat = struct {
	Type string `json:"type"`
}{"heartbeat"}

func (m *interpManager) handleRun(w http.ResponseWriter, r *http.Request) {
	var req api.RunCodeRequest
	if err := decodeJSON(w, r, maxCodeBody, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > maxTimeoutMs {
		writeError(w, errdefs.InvalidArgument("timeoutMs %d out of range", req.TimeoutMs))
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
		writeError(w, err)
		return
	}
	code := req.Code
	var tsErr *api.CodeError
	if c.language == api.LangTypeScript {
		code, tsErr = transpileTS(code)
	}

	// Serialize runs of one context; give up if the client leaves first.
	locked := make(chan struct{})
	go func() {
		c.run.Lock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-r.Context().Done():
		go func() { <-locked; c.run.Unlock() }()
		return
	}
	defer c.run.Unlock()
	if err := m.ensureKernel(c, false); err != nil {
		writeError(w, err)
		return
	}
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()

	w.Header().Set("Content-Type", CodeContentType)
	w.WriteHeader(http.StatusOK)
	ew := &eventWriter{w: w, rc: http.NewResponseController(w)}
	ew.rc.Flush()
	if tsErr != nil {
		ew.write(api.CodeEvent{Type: api.CodeEventError, Error: tsErr})
		ew.write(api.CodeEvent{Type: api.CodeEventComplete, Context: c.id})
		return
	}
	m.runOn(r, ew, c, k, codeRequest{Code: code, Env: req.Env}, time.Duration(req.TimeoutMs)*time.Millisecond)
}

// runOn sends one request to k and forwards its events until complete.
// Events left over from earlier (output of background threads between
// runs) are dropped first.
func (m *interpManager) runOn(r *http.Request, ew *eventWriter, c *codeContext, k *kernel, req codeRequest, timeout time.Duration) {
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
	interrupted := false
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
	hb := time.NewTicker(m.s.cfg.HeartbeatInterval)
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
			fail("InterpreterKilled", fmt.Sprintf("the code did not stop within %s of the interrupt, so the %s interpreter was killed; its state is lost and the next run starts a fresh interpreter", interruptGrace, c.language))
			return
		case <-hb.C:
			ew.write(heartbeat)
		}
	}
}

package remote

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
)

// handler serves one node.Node to the control plane.
type handler struct {
	n     node.Node
	token []byte
	mux   *http.ServeMux
}

// NewHandler serves n over the protocol of this package. token is the
// cluster credential every request must carry as "Authorization: Bearer
// <token>"; it is not a user API key and grants the whole node. An empty
// token refuses every request (a node never serves unauthenticated).
func NewHandler(n node.Node, token string) http.Handler {
	h := &handler{n: n, token: []byte(token), mux: http.NewServeMux()}
	sb := Prefix + "/sandboxes/{name}"
	h.mux.HandleFunc("GET "+sb, h.sandbox(h.status))
	h.mux.HandleFunc("POST "+sb+"/start", h.sandbox(h.start))
	h.mux.HandleFunc("POST "+sb+"/update", h.sandbox(h.update))
	h.mux.HandleFunc("POST "+sb+"/stop", h.sandbox(h.stop))
	h.mux.HandleFunc("POST "+sb+"/destroy", h.sandbox(h.destroy))
	h.mux.HandleFunc("POST "+sb+"/signal", h.sandbox(h.signal))
	h.mux.HandleFunc("PUT "+sb+"/inactivity-timeout", h.sandbox(h.inactivity))
	h.mux.HandleFunc("POST "+sb+"/snapshot", h.sandbox(h.snapshot))
	h.mux.HandleFunc("POST "+sb+"/exec", h.sandbox(h.exec))
	h.mux.HandleFunc("GET "+sb+"/agent", h.sandbox(h.agent))
	h.mux.HandleFunc("GET "+Prefix+"/images", h.images)
	h.mux.HandleFunc("GET "+Prefix+"/info", h.info)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.NotFound("no node route %s %s", r.Method, r.URL.Path))
	})
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		writeError(w, errdefs.Unauthenticated("node API: missing or wrong cluster credential"))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// authorized compares the bearer token in constant time (its length is not
// secret: ConstantTimeCompare returns at once on a length mismatch).
func (h *handler) authorized(r *http.Request) bool {
	if len(h.token) == 0 {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), h.token) == 1
}

// sandbox validates the name before anything else runs.
func (h *handler) sandbox(f func(w http.ResponseWriter, r *http.Request, name string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := api.ValidateSandboxName(name); err != nil {
			writeError(w, err)
			return
		}
		f(w, r, name)
	}
}

func writeError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(api.HTTPStatus(err))
	json.NewEncoder(w).Encode(api.WireErrorBody(err)) // an internal hop: keep no_space
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// decode reads a bounded JSON body into v; malformed JSON is invalid
// argument (400) and an oversized body 413.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errdefs.InvalidArgument("request body over %d bytes", limit)
		}
		return errdefs.InvalidArgument("reading request body: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.InvalidArgument("malformed JSON body: %w", err)
	}
	return nil
}

func (h *handler) status(w http.ResponseWriter, r *http.Request, name string) {
	st, err := h.n.Status(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, st)
}

func (h *handler) start(w http.ResponseWriter, r *http.Request, name string) {
	var o node.StartOptions
	if err := decode(w, r, maxBody, &o); err != nil {
		writeError(w, err)
		return
	}
	if err := h.n.Start(r.Context(), name, o); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) update(w http.ResponseWriter, r *http.Request, name string) {
	var o node.StartOptions
	if err := decode(w, r, maxBody, &o); err != nil {
		writeError(w, err)
		return
	}
	if err := h.n.Update(r.Context(), name, o); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) stop(w http.ResponseWriter, r *http.Request, name string) {
	var o node.StopOptions
	if err := decode(w, r, maxBody, &o); err != nil {
		writeError(w, err)
		return
	}
	stopped, err := h.n.Stop(r.Context(), name, o)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, stopAnswer{Stopped: stopped})
}

func (h *handler) destroy(w http.ResponseWriter, r *http.Request, name string) {
	var req destroyRequest
	if err := decode(w, r, maxBody, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := h.n.Destroy(r.Context(), name, req.Reason); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) signal(w http.ResponseWriter, r *http.Request, name string) {
	var req signalRequest
	if err := decode(w, r, maxBody, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := h.n.Signal(r.Context(), name, req.Signal); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) inactivity(w http.ResponseWriter, r *http.Request, name string) {
	var req timeoutRequest
	if err := decode(w, r, maxBody, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := h.n.SetInactivityTimeout(r.Context(), name, req.Timeout); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) snapshot(w http.ResponseWriter, r *http.Request, name string) {
	var o node.SnapshotOptions
	if err := decode(w, r, maxBody, &o); err != nil {
		writeError(w, err)
		return
	}
	sn, err := h.n.Snapshot(r.Context(), name, o)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, sn)
}

func (h *handler) images(w http.ResponseWriter, r *http.Request) {
	m, err := h.n.Images(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, m)
}

func (h *handler) info(w http.ResponseWriter, r *http.Request) {
	in, err := h.n.Info(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, in)
}

// exec runs the command and streams its output as frames while it runs.
// The request's end (the client's Kill or cancel, or a lost connection)
// kills the process on this node.
func (h *handler) exec(w http.ResponseWriter, r *http.Request, name string) {
	var req execRequest
	if err := decode(w, r, maxExecBody, &req); err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	p, err := h.n.Exec(ctx, name, req.Argv, req.Options)
	if err != nil {
		writeError(w, err)
		return
	}
	// The node's own Process outlives its Exec context (a local exec runs
	// on after the call that started it); here the request is the owner.
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", ExecContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w, flush: rc.Flush}
	// No write may reach w once the handler returned (a pump still
	// reading a killed process's output gets an error instead).
	defer fw.close()
	// The head leaves with the first frame, or after headDelay for a
	// command that is silent so long: a short command's whole answer
	// (head, output, exit) then takes one write instead of two. The same
	// timer then beats every heartbeatEvery: one timer and no goroutine
	// of its own per exec (a ticker goroutine was one more wake-up at
	// every exec's end; its removal measured within noise on loopback,
	// but it is less work for a node running many execs).
	var beatMu sync.Mutex
	beatMu.Lock()
	var beat *time.Timer
	beat = time.AfterFunc(headDelay, func() {
		if fw.write(frameHeartbeat, nil) == nil {
			beatMu.Lock()
			beat.Reset(heartbeatEvery)
			beatMu.Unlock()
		}
	})
	beatMu.Unlock()
	defer func() {
		beatMu.Lock()
		beat.Stop()
		beatMu.Unlock()
	}()

	var wg sync.WaitGroup
	pump := func(t byte, rd io.Reader) {
		defer wg.Done()
		bp := pumpBufs.Get().(*[pumpBuf]byte)
		defer pumpBufs.Put(bp)
		buf := bp[:]
		for {
			n, err := rd.Read(buf)
			if n > 0 && fw.write(t, buf[:n]) != nil {
				p.Kill() // nobody reads it any more
				io.Copy(io.Discard, rd)
				return
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go pump(frameStdout, p.Stdout())
	go pump(frameStderr, p.Stderr())

	code, werr := p.Wait(ctx)
	if ctx.Err() != nil {
		return // the client is gone; the process was killed
	}
	wg.Wait() // every byte of output before the exit frame
	ex := exitPayload{Code: code}
	if werr != nil {
		e := api.WireErrorBody(werr)
		ex.Error = &e
	}
	data, _ := json.Marshal(ex)
	fw.last(frameExit, data)
}

// pumpBuf is the most output one frame carries from a pump's read; the
// buffers are pooled, as two fresh ones per exec were most of what an exec
// allocated on the node (garbage the collector then had to chase).
const pumpBuf = 32 << 10

var pumpBufs = sync.Pool{New: func() any { return new([pumpBuf]byte) }}

// agent splices an HTTP/1.1 Upgrade to a new connection to the sandbox's
// agent. The sandbox stays busy (awake) while the tunnel is open.
func (h *handler) agent(w http.ResponseWriter, r *http.Request, name string) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), AgentProtocol) {
		writeError(w, errdefs.InvalidArgument("agent tunnel needs Connection: Upgrade and Upgrade: %s", AgentProtocol))
		return
	}
	ctx := r.Context()
	ag, release, err := h.n.Agent(ctx, name)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	ac, err := ag.Dial(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	defer ac.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, errdefs.Internal("agent tunnel: %w", err))
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + AgentProtocol + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	// Bytes the client sent after its request head are already in brw.
	var from io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		from = io.MultiReader(strings.NewReader(string(early)), conn)
	}
	splice(conn, from, ac)
}

// splice copies both ways, passing a half-close on, until both ends are
// done; an error on either side closes both.
func splice(client net.Conn, from io.Reader, agent net.Conn) {
	var wg sync.WaitGroup
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); agent.Close() }) }
	one := func(dst net.Conn, src io.Reader) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			closeBoth()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
			closeBoth()
		}
	}
	wg.Add(2)
	go one(agent, from)
	go one(client, agent)
	wg.Wait()
	closeBoth()
}

func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
